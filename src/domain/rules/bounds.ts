// Every numeric bound on a rule definition, in one place, unit in the name. They keep compile
// and evaluation cost bounded (a rule is evaluated on the hot path of every matching event).
// Candidates to move into src/limits.ts when rules are wired into the service.

export const ruleBounds = {
  /** Nesting of all/any/not groups below the root of `conditions`. */
  conditionDepthMax: 8,
  /** Leaf conditions in one definition (hoisted segment checks included). */
  conditionLeavesMax: 64,
  /** Members of one group (`all`/`any`) or of one `in`/`not_in` value list. */
  groupItemsMax: 64,
  inValuesMax: 1000,
  limitsMax: 8,
  scopePathsMax: 4,
  actionsMax: 16,
  /** One path string, and the number of segments after its prefix. */
  pathCharsMax: 256,
  pathSegmentsMax: 8,
  /** A string compared against (eq, contains, in members...). */
  valueCharsMax: 1024,
  idCharsMax: 128,
  eventNameCharsMax: 128,
  /**
   * A string scope value of a per-customer limit longer than this is kept in the limit key as a
   * hash (evaluate.ts, scopeKey). Part of the stored key format: never change it.
   */
  scopeValueCharsMax: 64,
} as const;
