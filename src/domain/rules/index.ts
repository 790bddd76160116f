// The rules mechanic's public surface: validate a definition document, compile it into a plain
// data plan (in the piscina pool), evaluate plans on the actor's hot path, trace for simulate.
// Everything here is pure: no clock, no randomness, no I/O, no throw.
export { ruleBounds } from './bounds.js';
export {
  compileRule,
  NodeKind,
  type PlanAction,
  type PlanAmountFrom,
  type PlanGroup,
  type PlanLeaf,
  type PlanLimit,
  type PlanNode,
  type PlanNot,
  type PlanPath,
  planFormat,
  type ResolvedAction,
  type RuleCompilation,
  type RuleMeta,
  type RulePlan,
  validateAndCompile,
} from './compile.js';
export {
  boundLimitKey,
  budgetExhaustedDetail,
  type EvalCustomer,
  type EvalEvent,
  type EvalInput,
  evaluatePlan,
  isSharedScope,
  type LimitKey,
  limitKey,
  type RuleOutcome,
  type RuleTrace,
  resolvePath,
  type SharedLimitAnswer,
  type SkipReason,
  scopeKey,
  skipReasons,
  type TraceCheck,
  type TraceStep,
  traceRule,
} from './evaluate.js';
export { Op, type OpCode, type OpName, opNames } from './ops.js';
export { PathSource, parsePath } from './paths.js';
export {
  actionSchema,
  actionTypes,
  type Condition,
  conditionSchema,
  formatProblemPath,
  type LeafCondition,
  type RuleAction,
  type RuleDefinition,
  ruleDefinitionSchema,
  type RuleLimit,
  type RuleProblem,
  type RuleSchemaName,
  ruleSchemas,
  type RuleV1,
  type RuleV2,
  type RuleValidation,
  type ValidateOptions,
  ruleV1Schema,
  ruleV2Schema,
  validateRule,
} from './schema.js';
export { budgetKeysOf, type SimulationInput, type SimulationResult, sharedScopeKeys, simulateRule, toEvalInput } from './simulate.js';
export { type TrustLevel, trustLevels, trustRank } from './trust.js';
