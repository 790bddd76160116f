// A JSON object (not null, not an array), for code reading bodies it did not type. Pure.

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
