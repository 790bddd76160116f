// Reads what a rule definition's references need from the environment's catalogs: at most one read
// per catalog (currencies, tier programs with their levels, segments and counters from their per-environment caches; rewards
// and challenges by the ids named, one query each), and none for a kind nothing names. The check
// itself is the domain's referenceProblems. Never run inside a transaction: embedded mode has one
// SQL connection, so a catalog query there would wait on the transaction forever.
import {
  type KnownResources,
  type ReferenceKind,
  type RuleReference,
  referencedKinds,
  referenceProblems,
  ruleReferences,
} from '../domain/rules/references.js';
import { type RuleProblem, validateRule } from '../domain/rules/schema.js';

export interface ReferenceSources {
  currencies(environmentId: string): Promise<ReadonlyArray<{ key: string }>>;
  tierPrograms(environmentId: string): Promise<ReadonlyArray<{ id: string; key: string; levels: ReadonlyArray<{ key: string }> }>>;
  segments(environmentId: string): Promise<ReadonlyArray<{ name: string }>>;
  counters(environmentId: string): Promise<ReadonlyArray<{ name: string }>>;
  /** Which of `ids` exist (archived rewards included). */
  rewards(environmentId: string, ids: readonly string[]): Promise<readonly string[]>;
  /** Which of `ids` exist (any status). */
  challenges(environmentId: string, ids: readonly string[]): Promise<readonly string[]>;
}

const none: ReadonlySet<string> = new Set();
const noPrograms: ReadonlyMap<string, ReadonlySet<string>> = new Map();

function namesOf(refs: readonly RuleReference[], kind: ReferenceKind): string[] {
  return [...new Set(refs.filter((r) => r.kind === kind).map((r) => r.name))];
}

/** What exists of the kinds `refs` name (the others are left empty: nothing asks about them). */
export async function knownResources(sources: ReferenceSources, environmentId: string, refs: readonly RuleReference[]): Promise<KnownResources> {
  const kinds = referencedKinds(refs);
  const programs = kinds.has('tier_program') || kinds.has('tier_program_key') || kinds.has('tier_level') ? sources.tierPrograms(environmentId) : null;
  const [currencies, tierPrograms, tierLevels, segments, rewards, challenges, counters] = await Promise.all([
    kinds.has('currency') ? sources.currencies(environmentId).then((cs) => new Set(cs.map((c) => c.key))) : none,
    programs === null ? none : programs.then((ps) => new Set(ps.flatMap((p) => [p.key, p.id]))),
    programs === null ? noPrograms : programs.then((ps) => new Map(ps.map((p) => [p.key, new Set(p.levels.map((l) => l.key))]))),
    kinds.has('segment') ? sources.segments(environmentId).then((ss) => new Set(ss.map((s) => s.name))) : none,
    kinds.has('reward') ? sources.rewards(environmentId, namesOf(refs, 'reward')).then((ids) => new Set(ids)) : none,
    kinds.has('challenge') ? sources.challenges(environmentId, namesOf(refs, 'challenge')).then((ids) => new Set(ids)) : none,
    kinds.has('counter') ? sources.counters(environmentId).then((cs) => new Set(cs.map((c) => c.name))) : none,
  ]);
  return { currencies, tierPrograms, tierLevels, segments, rewards, challenges, counters };
}

/**
 * The reference problems of a definition in an environment. A definition of the wrong shape has
 * none here: compiling it reports its shape problems, which come first.
 */
export async function definitionReferenceProblems(sources: ReferenceSources, environmentId: string, definition: unknown): Promise<RuleProblem[]> {
  const v = validateRule(definition, { storedDefinition: true });
  if (!v.ok) return [];
  const refs = ruleReferences(v.definition);
  if (refs.length === 0) return [];
  return referenceProblems(refs, await knownResources(sources, environmentId, refs));
}

/** The segments a definition names (customer.segments contains <name>); none for a definition of the wrong shape. */
export function segmentReferences(definition: unknown): RuleReference[] {
  const v = validateRule(definition, { storedDefinition: true });
  if (!v.ok) return [];
  return ruleReferences(v.definition).filter((r) => r.kind === 'segment');
}

/** The problems of segment references whose name is not in `present` (as referenceProblems words them). */
export function segmentReferenceProblems(refs: readonly RuleReference[], present: ReadonlySet<string>): RuleProblem[] {
  return referenceProblems(refs, {
    currencies: none,
    tierPrograms: none,
    tierLevels: noPrograms,
    segments: present,
    rewards: none,
    challenges: none,
    counters: none,
  });
}
