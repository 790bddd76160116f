// Rule definition documents `service.rule/v1` and `service.rule/v2`: zod schemas (also the
// OpenAPI description) and validateRule, which answers the parsed definition or EVERY problem as
// {path: 'conditions.all[2].op', message} for a 422 rule_invalid. Pure and synchronous (zod
// safeParse, no async refinements); never throws. Semantic checks (path prefixes, op vs value)
// live in paths.ts / ops.ts so compile and validation agree by construction.
// The same schemas describe definitions in /v1/openapi.json (components RuleDefinition,
// RuleCondition, RuleConditionLeaf, RuleAction): what zod cannot render from a refinement (an
// integer, a path's grammar, the value an op takes) is added with .meta() or documentAs, which
// document and never validate. test/api/openapi-request-bodies.test.ts holds them to validateRule.
import { formatPath as formatProblemPath } from '../../util/param-path.js';
import { z } from 'zod';
import { documentAs } from '../../util/doc-schema.js';
import { ruleBounds } from './bounds.js';
import { type OpName, type OpValueForm, checkOpValue, opNames, opReadsSource, opValueForms } from './ops.js';
import { PathSource, parsePath, pathPattern, pathSources } from './paths.js';
import { type TrustLevel, trustLevels, unreachableTrustLevels } from './trust.js';

export const ruleSchemas = ['service.rule/v1', 'service.rule/v2'] as const;
export type RuleSchemaName = (typeof ruleSchemas)[number];

export interface LeafCondition {
  path: string;
  op: OpName;
  value?: unknown;
}
export type Condition = LeafCondition | { all: Condition[] } | { any: Condition[] } | { not: Condition };

export interface RuleLimit {
  id: string;
  scope: string[];
  max: number;
}

export type RuleAction =
  | { type: 'points.award'; currency: string; amount?: number; amount_from?: string; multiplier?: number }
  | { type: 'item.grant'; item: string; quantity: number }
  | { type: 'tier.evaluate'; program?: string }
  | { type: 'reward.issue'; reward_id: string }
  | { type: 'challenge.progress'; challenge_id: string };
export const actionTypes = ['points.award', 'item.grant', 'tier.evaluate', 'reward.issue', 'challenge.progress'] as const;

export interface RuleV1 {
  schema: 'service.rule/v1';
  trigger: { event: string };
  limits?: RuleLimit[];
  /** v1: a flat list of leaf conditions, all of which must hold. */
  conditions?: LeafCondition[];
  actions: RuleAction[];
}
export interface RuleV2 {
  schema: 'service.rule/v2';
  trigger: { kind: 'customer_event'; event: string };
  limits?: RuleLimit[];
  conditions?: Condition;
  trust?: { minimum: TrustLevel };
  actions: RuleAction[];
}
export type RuleDefinition = RuleV1 | RuleV2;

export interface RuleProblem {
  path: string;
  message: string;
}
export type RuleValidation = { ok: true; definition: RuleDefinition } | { ok: false; problems: RuleProblem[] };

// Same shape the gateway accepts for event names (dotted snake_case); domain cannot import it.
const eventNamePattern = /^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$/;
const idPattern = /^[A-Za-z0-9_.:-]+$/;

export const eventNameSchema = z
  .string({ error: 'An event name (string) is required.' })
  .min(1, 'An event name is required.')
  .max(ruleBounds.eventNameCharsMax, `An event name has at most ${ruleBounds.eventNameCharsMax} characters.`)
  .regex(eventNamePattern, 'Use dotted snake_case, e.g. order.completed.');

const key = (what: string) =>
  z
    .string({ error: `${what} (string) is required.` })
    .min(1, `${what} must not be empty.`)
    .max(ruleBounds.idCharsMax, `${what} has at most ${ruleBounds.idCharsMax} characters.`)
    .regex(idPattern, `${what} may hold only letters, digits, _, ., : and -.`);

const positiveInt = (what: string) => {
  const message = `${what} must be a positive integer (at most ${Number.MAX_SAFE_INTEGER}).`;
  return z
    .number({ error: message })
    .refine((n) => Number.isSafeInteger(n) && n > 0, { message })
    .meta({ type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER });
};

/** How the OpenAPI document names each source of a path. */
const sourceNames: Readonly<Record<PathSource, string>> = {
  [PathSource.eventName]: 'event.name',
  [PathSource.eventProperty]: 'event.properties.<name>',
  [PathSource.attribute]: 'customer.attributes.<name>',
  [PathSource.counter]: 'customer.counters.<name>',
  [PathSource.segments]: 'customer.segments',
  [PathSource.tier]: 'customer.tiers.<program key>',
  [PathSource.externalId]: 'customer.external_id',
  [PathSource.customer]: 'customer',
};

/** A path's grammar for the OpenAPI document: its length and a pattern of exactly the paths of these sources. */
const pathMeta = (sources: readonly PathSource[]) => ({
  maxLength: ruleBounds.pathCharsMax,
  pattern: pathPattern(sources),
  description: `A dotted path: ${sources.map((src) => sourceNames[src]).join(', ')} (names of letters, digits, _, $, : and -).`,
});

const path = (use: 'condition' | 'scope' | 'amount') =>
  z
    .string({ error: 'A path (string) is required.' })
    .superRefine((p, ctx) => {
      const r = parsePath(p, use);
      if (!r.ok) ctx.addIssue({ code: 'custom', message: r.message });
    })
    .meta(pathMeta(pathSources[use]));

const trustChoices = `use one of ${trustLevels.join(', ')} (lowest first)`;

function trustMinimumProblem(input: unknown): string {
  if (input === undefined) return `minimum is required; ${trustChoices}.`;
  if (typeof input === 'string' && unreachableTrustLevels.includes(input)) {
    return `No event carries trust '${input}' (events are ${trustLevels.join(' or ')}), so the rule would never fire; ${trustChoices}.`;
  }
  return `Unknown trust level ${JSON.stringify(input)}; ${trustChoices}.`;
}

const opSchema = z.enum(opNames, {
  error: (iss) =>
    iss.input === undefined
      ? `An op is required; use one of ${opNames.join(', ')}.`
      : `Unknown op ${JSON.stringify(iss.input)}; use one of ${opNames.join(', ')}.`,
});

function valueDoc(form: OpValueForm): z.ZodType {
  const text = z.string().max(ruleBounds.valueCharsMax);
  switch (form) {
    case 'primitive':
      return z.union([text, z.number(), z.boolean(), z.null()]);
    case 'scalar':
      return z.union([text, z.number(), z.boolean()]);
    case 'number':
      return z.number();
    case 'list':
      return z.array(z.union([text, z.number(), z.boolean()])).min(1).max(ruleBounds.inValuesMax);
    case 'flag':
      return z.boolean().optional().describe('Default true: the path holds a value (not null). false: it does not.');
  }
}

/**
 * Documentation of a leaf {path, op, value} over paths of these sources: one form per group of
 * ops taking the same value and reading the same sources (checkOpValue's rules), discriminated by
 * op. What it leaves to the validators: the value's type a source fixes (event.name,
 * customer.external_id, customer.tiers.* and customer.segments compare strings, counters numbers).
 */
export function leafConditionDoc(sources: readonly PathSource[]): z.ZodType {
  const groups = new Map<string, { ops: OpName[]; form: OpValueForm; sources: PathSource[] }>();
  for (const op of opNames) {
    const readable = sources.filter((src) => opReadsSource(op, src));
    if (readable.length === 0) continue;
    const key = `${opValueForms[op]}:${readable.join(',')}`;
    const group = groups.get(key);
    if (group === undefined) groups.set(key, { ops: [op], form: opValueForms[op], sources: readable });
    else group.ops.push(op);
  }
  const forms = [...groups.values()].map((g) =>
    z.strictObject({
      path: z.string().meta(pathMeta(g.sources)),
      op: g.ops.length === 1 ? z.literal(g.ops[0]!) : z.enum(g.ops as [OpName, ...OpName[]]),
      value: valueDoc(g.form),
    }),
  );
  const strings = [PathSource.eventName, PathSource.externalId, PathSource.tier, PathSource.segments].filter((src) => sources.includes(src));
  const typed = [
    strings.length > 0 ? ` ${strings.map((src) => sourceNames[src]).join(', ')} compare with strings.` : '',
    sources.includes(PathSource.counter) ? ` ${sourceNames[PathSource.counter]} compares with numbers.` : '',
  ].join('');
  return z
    .discriminatedUnion('op', forms as unknown as [z.ZodObject, ...z.ZodObject[]])
    .describe(
      '{path, op, value}: compares the value at path with value; op decides what value is and which paths it reads. ' +
        `Nothing is coerced: a value of another type never matches.${typed}`,
    );
}

export const leafConditionSchema = documentAs(
  z
    .strictObject({ path: path('condition'), op: opSchema, value: z.unknown().optional() })
    .superRefine((leaf, ctx) => {
      // Runs even when path or op failed: check only what is checkable.
      if (typeof leaf.op !== 'string' || !(opNames as readonly string[]).includes(leaf.op)) return;
      const parsed = typeof leaf.path === 'string' ? parsePath(leaf.path, 'condition') : null;
      const src = parsed?.ok ? parsed.src : null;
      const problem = checkOpValue(leaf.op, leaf.value, Object.hasOwn(leaf, 'value') && leaf.value !== undefined, src);
      if (problem !== null) ctx.addIssue({ code: 'custom', message: problem.message, path: [problem.field] });
    })
    .describe('{path, op, value?}: compares the value at path with value.'),
  leafConditionDoc(pathSources.condition).meta({ id: 'RuleConditionLeaf' }),
);

const conditionBounds = `Groups nest at most ${ruleBounds.conditionDepthMax} deep, with at most ${ruleBounds.conditionLeavesMax} leaves in all.`;

const groupItems = (name: string) =>
  z
    .array(z.lazy(() => conditionSchema), { error: `${name} takes an array of conditions.` })
    .min(1, `${name} needs at least one condition.`)
    .max(ruleBounds.groupItemsMax, `${name} takes at most ${ruleBounds.groupItemsMax} conditions.`);

export const conditionSchema: z.ZodType<Condition> = z
  .lazy(() =>
    z.union([
      leafConditionSchema,
      z.strictObject({ all: groupItems('all') }),
      z.strictObject({ any: groupItems('any') }),
      z.strictObject({ not: conditionSchema }),
    ]),
  )
  .meta({
    id: 'RuleCondition',
    description: `A leaf {path, op, value}, or {all: [...]} (every one holds), {any: [...]} (one holds), {not: condition}. ${conditionBounds}`,
  });

/**
 * Documentation of a condition over paths of some sources only (a segment's, a counter filter's):
 * the rule condition language with those leaves, as the OpenAPI component `id`.
 */
export function conditionTreeDoc(id: string, sources: readonly PathSource[], description: string): z.ZodType {
  const leaf = leafConditionDoc(sources);
  let tree: z.ZodType;
  const items = z
    .array(z.lazy(() => tree))
    .min(1)
    .max(ruleBounds.groupItemsMax);
  tree = z
    .lazy(() => z.union([leaf, z.strictObject({ all: items }), z.strictObject({ any: items }), z.strictObject({ not: z.lazy(() => tree) })]))
    .meta({ id, description: `${description} ${conditionBounds}` });
  return tree;
}

const limitSchema = z.strictObject({
  id: key('A limit id'),
  scope: z
    .array(path('scope'), { error: 'scope is an array of paths, such as ["customer", "event.properties.order_id"].' })
    .min(1, 'scope needs at least one path (use ["customer"] for once per customer).')
    .max(ruleBounds.scopePathsMax, `scope takes at most ${ruleBounds.scopePathsMax} paths.`)
    // sharedScopeProblems: without `customer`, a scope is shared by every customer and reads the event only.
    .meta({
      anyOf: [{ contains: { const: 'customer' } }, { items: { pattern: pathPattern([PathSource.eventName, PathSource.eventProperty]) } }],
      description:
        'The values the limit counts per: with "customer", per customer (e.g. ["customer", "event.properties.match_id"]); ' +
        'without it, shared by every customer, so only event.name and event.properties.<name> paths.',
    }),
  max: positiveInt('max'),
});

const limitsSchema = z
  .array(limitSchema, { error: 'limits is an array of {id, scope, max}.' })
  .max(ruleBounds.limitsMax, `A rule has at most ${ruleBounds.limitsMax} limits.`)
  .superRefine((ls, ctx) => {
    const seen = new Set<string>();
    ls.forEach((l, i) => {
      if (typeof l?.id !== 'string') return;
      if (seen.has(l.id)) ctx.addIssue({ code: 'custom', message: `Duplicate limit id '${l.id}'.`, path: [i, 'id'] });
      seen.add(l.id);
    });
  });

const pointsAward = z
  .strictObject({
    type: z.literal('points.award'),
    currency: key('currency'),
    amount: positiveInt('amount').optional(),
    amount_from: path('amount').optional(),
    multiplier: z
      .number({ error: 'multiplier must be a positive finite number.' })
      .refine((n) => Number.isFinite(n) && n > 0, { message: 'multiplier must be a positive finite number.' })
      .meta({ exclusiveMinimum: 0, description: 'The award is floor(value at amount_from x multiplier); default 1.' })
      .optional(),
  })
  .superRefine((a, ctx) => {
    const hasAmount = a.amount !== undefined;
    const hasFrom = a.amount_from !== undefined;
    if (hasAmount && hasFrom) ctx.addIssue({ code: 'custom', message: 'Give amount or amount_from, not both.', path: ['amount_from'] });
    if (!hasAmount && !hasFrom) {
      ctx.addIssue({ code: 'custom', message: 'points.award needs amount (a positive integer) or amount_from (a numeric path).', path: ['amount'] });
    }
    if (a.multiplier !== undefined && !hasFrom) {
      ctx.addIssue({ code: 'custom', message: 'multiplier applies only with amount_from.', path: ['multiplier'] });
    }
  })
  .meta({
    oneOf: [{ required: ['amount'] }, { required: ['amount_from'] }],
    dependentRequired: { multiplier: ['amount_from'] },
    description: 'amount (fixed) or amount_from (a numeric path, optionally with multiplier), not both.',
  });

export const itemGrantSchema = z.strictObject({ type: z.literal('item.grant'), item: key('item'), quantity: positiveInt('quantity') });
export const tierEvaluateSchema = z.strictObject({ type: z.literal('tier.evaluate'), program: key('program').optional() });
export const rewardIssueSchema = z.strictObject({ type: z.literal('reward.issue'), reward_id: key('reward_id') });

/** points.award with a fixed amount only (challenge completion actions; documentation). */
export const fixedPointsAwardSchema = z.strictObject({ type: z.literal('points.award'), currency: key('currency'), amount: positiveInt('amount') });

export const actionSchema = z
  .discriminatedUnion('type', [
    pointsAward,
    itemGrantSchema,
    tierEvaluateSchema,
    rewardIssueSchema,
    z.strictObject({ type: z.literal('challenge.progress'), challenge_id: key('challenge_id') }),
  ])
  .meta({ id: 'RuleAction' });

const actionsSchema = z
  .array(actionSchema, { error: 'actions is an array of {type, ...}.' })
  .min(1, 'A rule needs at least one action.')
  .max(ruleBounds.actionsMax, `A rule has at most ${ruleBounds.actionsMax} actions.`);

export const ruleV1Schema = z.strictObject({
  schema: z.literal('service.rule/v1'),
  trigger: z.strictObject({ event: eventNameSchema }, { error: 'trigger is {event}.' }),
  limits: limitsSchema.optional(),
  conditions: z
    .array(leafConditionSchema, {
      error: 'In service.rule/v1, conditions is an array of {path, op, value}; use service.rule/v2 for all/any/not.',
    })
    .max(ruleBounds.conditionLeavesMax, `A rule has at most ${ruleBounds.conditionLeavesMax} conditions.`)
    .optional(),
  actions: actionsSchema,
});

export const ruleV2Schema = z
  .strictObject({
    schema: z.literal('service.rule/v2'),
    trigger: z.strictObject(
      {
        kind: z.literal('customer_event', { error: "trigger.kind must be 'customer_event'." }),
        event: eventNameSchema,
      },
      { error: "trigger is {kind: 'customer_event', event}." },
    ),
    limits: limitsSchema.optional(),
    conditions: conditionSchema.optional(),
    trust: z
      .strictObject(
        {
          minimum: z.enum(trustLevels, { error: (iss) => trustMinimumProblem(iss.input) }),
        },
        { error: 'trust is {minimum}.' },
      )
      .optional(),
    actions: actionsSchema,
  })
  .superRefine((def, ctx) => {
    // Bounds on the whole tree: checked on the raw input, so they are reported with the rest.
    const count = { leaves: 0, deepest: 0 };
    measure(def.conditions, 0, count);
    if (count.deepest > ruleBounds.conditionDepthMax) {
      ctx.addIssue({ code: 'custom', message: `conditions nest at most ${ruleBounds.conditionDepthMax} groups deep.`, path: ['conditions'] });
    }
    if (count.leaves > ruleBounds.conditionLeavesMax) {
      ctx.addIssue({ code: 'custom', message: `A rule has at most ${ruleBounds.conditionLeavesMax} conditions.`, path: ['conditions'] });
    }
  });

function measure(c: unknown, depth: number, count: { leaves: number; deepest: number }): void {
  if (c === null || typeof c !== 'object' || depth > ruleBounds.conditionDepthMax + 1) {
    count.deepest = Math.max(count.deepest, depth);
    return;
  }
  const o = c as Record<string, unknown>;
  const items = Array.isArray(o.all) ? o.all : Array.isArray(o.any) ? o.any : 'not' in o ? [o.not] : null;
  if (items === null) {
    count.leaves++;
    return;
  }
  count.deepest = Math.max(count.deepest, depth + 1);
  for (const item of items) measure(item, depth + 1, count);
}

/** Both versions, keyed on `schema`: the shape published in the OpenAPI document (validateRule is the validator). */
export const ruleDefinitionSchema = z.discriminatedUnion('schema', [ruleV1Schema, ruleV2Schema]).meta({
  id: 'RuleDefinition',
  description:
    'service.rule/v1: trigger {event}, conditions a list of leaves (all must hold). service.rule/v2: trigger {kind: customer_event, event}, ' +
    'conditions one condition, trust {minimum}. Checked beyond this schema: limit ids are unique per definition, and publish names ' +
    'only currencies, rewards, challenges, tier programs (and their levels), segments and counters the environment has.',
});



function at(root: unknown, p: readonly PropertyKey[]): unknown {
  let v = root;
  for (const seg of p) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[seg];
  }
  return v;
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

const conditionForms = 'A condition is {path, op, value?}, {all: [...]}, {any: [...]} or {not: condition}.';

/** Flattens zod issues into problems; picks the condition form the client meant in a union. */
function collect(issues: readonly z.core.$ZodIssue[], root: unknown, base: readonly PropertyKey[], out: RuleProblem[]): void {
  for (const issue of issues) {
    const full = [...base, ...issue.path];
    switch (issue.code) {
      case 'unrecognized_keys':
        for (const k of issue.keys) out.push({ path: formatProblemPath([...full, k]), message: 'Unknown field.' });
        break;
      case 'invalid_union': {
        if (issue.discriminator === 'type') {
          const got = at(root, full);
          out.push({
            path: formatProblemPath(full),
            message:
              got === undefined
                ? `An action type is required; use one of ${actionTypes.join(', ')}.`
                : `Unknown action type ${JSON.stringify(got)}; use one of ${actionTypes.join(', ')}.`,
          });
          break;
        }
        const input = at(root, full);
        const branch =
          input === null || typeof input !== 'object' || Array.isArray(input)
            ? -1
            : 'all' in input
              ? 1
              : 'any' in input
                ? 2
                : 'not' in input
                  ? 3
                  : 'path' in input || 'op' in input || 'value' in input
                    ? 0
                    : -1;
        const chosen = branch >= 0 ? issue.errors[branch] : undefined;
        if (chosen === undefined) out.push({ path: formatProblemPath(full), message: conditionForms });
        else collect(chosen, root, full, out);
        break;
      }
      case 'invalid_type': {
        const got = at(root, full);
        // Our own messages (custom `error`) are kept; zod's generic ones are rephrased.
        const generic = issue.message.startsWith('Invalid input');
        const message =
          got === undefined
            ? generic
              ? `Required (expected ${issue.expected}).`
              : `Required: ${issue.message}`
            : generic
              ? `Expected ${issue.expected}, got ${describe(got)}.`
              : issue.message;
        out.push({ path: formatProblemPath(full), message });
        break;
      }
      default:
        out.push({ path: formatProblemPath(full), message: issue.message });
    }
  }
}

/**
 * A limit scope without `customer` is shared by every customer, so it may read the event only:
 * each `customer.*` path (attributes, tiers, external_id) of such a scope is a problem. Checked
 * on the raw document, so it is reported with the schema's problems.
 */
function sharedScopeProblems(definition: unknown): RuleProblem[] {
  const ls = (definition as { limits?: unknown }).limits;
  if (!Array.isArray(ls)) return [];
  const out: RuleProblem[] = [];
  ls.forEach((l: unknown, i) => {
    const scope = l !== null && typeof l === 'object' ? (l as { scope?: unknown }).scope : undefined;
    if (!Array.isArray(scope) || scope.includes('customer')) return;
    scope.forEach((p: unknown, j) => {
      if (typeof p !== 'string') return;
      const r = parsePath(p, 'scope');
      if (!r.ok || r.src === PathSource.eventName || r.src === PathSource.eventProperty) return;
      out.push({
        path: formatProblemPath(['limits', i, 'scope', j]),
        message: `'${p}' reads the customer: a limit shared by customers may name only event.name and event.properties.<name> paths (add 'customer' to the scope to count per customer).`,
      });
    });
  });
  return out;
}

export interface ValidateOptions {
  /**
   * A definition stored before shared limits existed (compiled again at publish and simulate):
   * a scope naming `customer.*` paths without `customer` is accepted and counts per customer.
   */
  storedDefinition?: boolean;
}

/**
 * Validates a rule definition document. Every problem is reported (not only the first), each
 * naming the field the way a client writes it: `conditions.all[2].op`, `actions[0].amount`.
 */
export function validateRule(definition: unknown, options: ValidateOptions = {}): RuleValidation {
  if (definition === null || typeof definition !== 'object' || Array.isArray(definition)) {
    return { ok: false, problems: [{ path: 'definition', message: `A rule definition is an object; got ${describe(definition)}.` }] };
  }
  const schema = (definition as { schema?: unknown }).schema;
  const s = schema === 'service.rule/v1' ? ruleV1Schema : schema === 'service.rule/v2' ? ruleV2Schema : null;
  if (s === null) {
    const message =
      schema === undefined
        ? `schema is required; use ${ruleSchemas.join(' or ')}.`
        : `Unknown schema ${JSON.stringify(schema)}; use ${ruleSchemas.join(' or ')}.`;
    return { ok: false, problems: [{ path: 'schema', message }] };
  }
  const r = s.safeParse(definition);
  const scopes = options.storedDefinition === true ? [] : sharedScopeProblems(definition);
  if (r.success && scopes.length === 0) return { ok: true, definition: r.data as RuleDefinition };
  const problems: RuleProblem[] = [];
  if (!r.success) collect(r.error.issues, definition, [], problems);
  for (const p of scopes) problems.push(p);
  for (const p of problems) if (p.path.length === 0) p.path = 'definition';
  return { ok: false, problems };
}

export { formatProblemPath };
