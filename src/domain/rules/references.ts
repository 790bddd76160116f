// The resources a rule definition names (currencies, rewards, challenges, tier programs, segments,
// counters read through customer.counters.<name>, tier programs read through
// customer.tiers.<program key> and the level keys compared with them),
// each with the path a client writes (`actions[1].currency`, `conditions.all[0].value`), and the
// problems of those an environment lacks: publish and rollback refuse them as 422 rule_invalid.
// Pure: the caller reads each catalog once and passes what exists; never throws.
import { formatPath } from '../../util/param-path.js';
import type { Condition, LeafCondition, RuleDefinition, RuleProblem } from './schema.js';

export const referenceKinds = ['currency', 'reward', 'challenge', 'tier_program', 'tier_program_key', 'tier_level', 'segment', 'counter'] as const;
export type ReferenceKind = (typeof referenceKinds)[number];

export interface RuleReference {
  kind: ReferenceKind;
  /** The key, id or name as written. */
  name: string;
  /** Where it is written, as a rule_invalid problem names it. */
  path: string;
  /** tier_level: the program key whose levels `name` must be one of. */
  program?: string;
}

/** What exists in the environment, by the identifier a definition uses for each kind. */
export interface KnownResources {
  /** Currency keys. */
  currencies: ReadonlySet<string>;
  /** Reward ids (archived ones included: they answer reward_unavailable at runtime, not a dangling reference). */
  rewards: ReadonlySet<string>;
  /** Challenge ids. */
  challenges: ReadonlySet<string>;
  /** Tier program keys AND ids (tier.evaluate accepts either). */
  tierPrograms: ReadonlySet<string>;
  /** Level keys by tier program KEY (customer.tiers.<program key> reads a key, never an id). */
  tierLevels: ReadonlyMap<string, ReadonlySet<string>>;
  /** Segment names. */
  segments: ReadonlySet<string>;
  /** Counter definition names. */
  counters: ReadonlySet<string>;
}

const nouns: Record<Exclude<ReferenceKind, 'tier_level'>, string> = {
  currency: 'currency',
  reward: 'reward',
  challenge: 'challenge',
  tier_program: 'tier program',
  tier_program_key: 'tier program with key',
  segment: 'segment',
  counter: 'counter',
};

const counterPrefix = 'customer.counters.';

/** The counter a path reads (`customer.counters.<name>`, nothing after the name), or null. */
function counterOf(path: string): string | null {
  if (!path.startsWith(counterPrefix)) return null;
  const name = path.slice(counterPrefix.length);
  return name.length > 0 && !name.includes('.') ? name : null;
}

const tierPrefix = 'customer.tiers.';

/** The tier program key a path reads (`customer.tiers.<key>`, nothing after the key), or null. */
function tierOf(path: string): string | null {
  if (!path.startsWith(tierPrefix)) return null;
  const key = path.slice(tierPrefix.length);
  return key.length > 0 && !key.includes('.') ? key : null;
}

/** The level keys a leaf on customer.tiers.<key> compares with (eq, ne, in, not_in), with their paths. */
function tierLevelReferences(leaf: LeafCondition, program: string, at: PropertyKey[], out: RuleReference[]): void {
  if ((leaf.op === 'eq' || leaf.op === 'ne') && typeof leaf.value === 'string') {
    out.push({ kind: 'tier_level', name: leaf.value, path: formatPath([...at, 'value']), program });
  } else if ((leaf.op === 'in' || leaf.op === 'not_in') && Array.isArray(leaf.value)) {
    for (const [i, v] of leaf.value.entries()) {
      if (typeof v === 'string') out.push({ kind: 'tier_level', name: v, path: formatPath([...at, 'value', i]), program });
    }
  }
}

function isSegmentTest(leaf: LeafCondition): leaf is LeafCondition & { value: string } {
  return leaf.path === 'customer.segments' && leaf.op === 'contains' && typeof leaf.value === 'string';
}

function conditionReferences(c: Condition, at: PropertyKey[], out: RuleReference[]): void {
  if ('all' in c) {
    for (const [i, x] of c.all.entries()) conditionReferences(x, [...at, 'all', i], out);
  } else if ('any' in c) {
    for (const [i, x] of c.any.entries()) conditionReferences(x, [...at, 'any', i], out);
  } else if ('not' in c) {
    conditionReferences(c.not, [...at, 'not'], out);
  } else if (isSegmentTest(c)) {
    out.push({ kind: 'segment', name: c.value, path: formatPath([...at, 'value']) });
  } else {
    const counter = counterOf(c.path);
    if (counter !== null) out.push({ kind: 'counter', name: counter, path: formatPath([...at, 'path']) });
    const program = tierOf(c.path);
    if (program !== null) {
      out.push({ kind: 'tier_program_key', name: program, path: formatPath([...at, 'path']) });
      tierLevelReferences(c, program, at, out);
    }
  }
}

/**
 * Every reference of a definition validateRule accepted: actions, then conditions, then limit
 * scopes, each in document order. `tier.evaluate` without `program` names nothing (it re-places
 * every program). A level compared with customer.tiers.<key> is checked only when the program
 * exists (a missing program is its own problem).
 */
export function ruleReferences(definition: RuleDefinition): RuleReference[] {
  const out: RuleReference[] = [];
  definition.actions.forEach((a, i) => {
    const at = (field: string) => formatPath(['actions', i, field]);
    switch (a.type) {
      case 'points.award': {
        out.push({ kind: 'currency', name: a.currency, path: at('currency') });
        const counter = a.amount_from === undefined ? null : counterOf(a.amount_from);
        if (counter !== null) out.push({ kind: 'counter', name: counter, path: at('amount_from') });
        break;
      }
      case 'reward.issue':
        out.push({ kind: 'reward', name: a.reward_id, path: at('reward_id') });
        break;
      case 'challenge.progress':
        out.push({ kind: 'challenge', name: a.challenge_id, path: at('challenge_id') });
        break;
      case 'tier.evaluate':
        if (a.program !== undefined) out.push({ kind: 'tier_program', name: a.program, path: at('program') });
        break;
      case 'item.grant':
        break;
    }
  });
  const conditions = definition.conditions;
  if (Array.isArray(conditions)) {
    for (const [i, c] of conditions.entries()) conditionReferences(c, ['conditions', i], out);
  } else if (conditions !== undefined) {
    conditionReferences(conditions, ['conditions'], out);
  }
  for (const [i, limit] of (definition.limits ?? []).entries()) {
    for (const [j, p] of limit.scope.entries()) {
      const program = tierOf(p);
      if (program !== null) out.push({ kind: 'tier_program_key', name: program, path: formatPath(['limits', i, 'scope', j]) });
    }
  }
  return out;
}

/** The kinds a list of references needs read (a catalog nothing names is not read at all). */
export function referencedKinds(refs: readonly RuleReference[]): Set<ReferenceKind> {
  return new Set(refs.map((r) => r.kind));
}

function exists(r: RuleReference, k: KnownResources): boolean {
  switch (r.kind) {
    case 'currency':
      return k.currencies.has(r.name);
    case 'reward':
      return k.rewards.has(r.name);
    case 'challenge':
      return k.challenges.has(r.name);
    case 'tier_program':
      return k.tierPrograms.has(r.name);
    case 'tier_program_key':
      return k.tierLevels.has(r.name);
    case 'tier_level': {
      const levels = k.tierLevels.get(r.program ?? '');
      return levels === undefined || levels.has(r.name);
    }
    case 'segment':
      return k.segments.has(r.name);
    case 'counter':
      return k.counters.has(r.name);
  }
}

function problemMessage(r: RuleReference): string {
  if (r.kind === 'tier_level') return `Tier program '${r.program}' has no level '${r.name}'.`;
  return `No ${nouns[r.kind]} '${r.name}' in this environment.`;
}

/** One problem per reference the environment lacks, in the order of `refs`. */
export function referenceProblems(refs: readonly RuleReference[], k: KnownResources): RuleProblem[] {
  return refs.filter((r) => !exists(r, k)).map((r) => ({ path: r.path, message: problemMessage(r) }));
}
