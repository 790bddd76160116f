// SQL expressions that order journal offsets ('<ms>-<seq>', or '0') exactly like compareOffsets,
// so "only moves forward" is decided inside the one statement that writes, with no read-then-write
// race. numeric, not bigint: Redis stream ids use unsigned 64-bit parts.
// Must stay in step with compareOffsets in ../ports.ts (the contract suites check both agree).

/** A row value `(ms, seq)` for the offset column or parameter expression `expr`. */
export function offsetKeySql(expr: string): string {
  return `(split_part(${expr}, '-', 1)::numeric, coalesce(nullif(split_part(${expr}, '-', 2), ''), '0')::numeric)`;
}
