// The evaluation plans POST /v1/rules/{id}/simulate traces, one per stored rule record. The draft
// (or, without one, the active version's) definition is compiled in the worker pool once per
// record, and the plan is kept in a WeakMap keyed on that record; the trace itself is pure and
// cheap, so it runs on the request thread with no pool round trip. A change to the rule (PATCH of
// the draft, publish, rollback, any status change) drops the record from the catalog's cache, so
// the next simulate reads a new record and compiles again; an old record and its plan go together.
import type { Rule } from '../catalog/rules.js';
import type { RuleCompilation, RuleMeta } from '../domain/rules/compile.js';

/** Compiles a definition (in the worker pool), answering the plan or every problem found. */
export type CompilePlanFn = (definition: unknown, meta: RuleMeta) => Promise<RuleCompilation>;

/** Which definition simulate traces for a rule record: the draft (version null) or the active version's number. */
export function tracedDefinition(rule: Rule): { draft: boolean; version: number | null } {
  if (rule.draftDefinition !== null) return { draft: true, version: null };
  return { draft: false, version: rule.activeVersion?.number ?? null };
}

/** What simulate runs for a rule record: the draft when there is one, else the active version. */
export function simulatedDefinition(rule: Rule): { definition: unknown; meta: RuleMeta } {
  const draft = rule.draftDefinition !== null;
  return {
    definition: draft ? rule.draftDefinition : rule.activeVersion?.definition,
    meta: { ruleId: rule.id, versionNumber: draft ? 0 : (rule.activeVersion?.number ?? 0), priority: rule.priority },
  };
}

export class SimulationPlans {
  private readonly plans = new WeakMap<Rule, Promise<RuleCompilation>>();

  constructor(private readonly compile: CompilePlanFn) {}

  /**
   * The compilation of the record's simulated definition: compiled on the first call for this
   * record, shared by the calls after it (concurrent ones wait on the same compilation). A failed
   * compilation (the pool could not answer) is not kept, so the next call tries again; a definition
   * with problems is kept (it is a fact of the record).
   */
  of(rule: Rule): Promise<RuleCompilation> {
    let plan = this.plans.get(rule);
    if (plan === undefined) {
      const { definition, meta } = simulatedDefinition(rule);
      plan = this.compile(definition, meta);
      this.plans.set(rule, plan);
      plan.catch(() => {
        if (this.plans.get(rule) === plan) this.plans.delete(rule);
      });
    }
    return plan;
  }
}
