// Documentation-only schemas: a request field that a semantic validator checks (a rule definition
// checked by validateRule answers 422 rule_invalid naming each bad path; a segment condition is
// checked by the domain) is declared loosely in its route's zod schema (z.unknown(), z.custom) so
// that those validators, not zod, give the answer. documentAs pairs such a field with the zod
// schema that describes what the validators accept; /v1/openapi.json renders that one in its
// place (gateway/openapi.ts). The pairing never takes part in validation.
import type { z } from 'zod';

const documentation = new WeakMap<z.core.$ZodType, z.ZodType>();

/** Returns `schema` itself, which the OpenAPI document describes with `doc`. */
export function documentAs<T extends z.ZodType>(schema: T, doc: z.ZodType): T {
  documentation.set(schema, doc);
  return schema;
}

/** The documentation of a schema, or of the schema it was derived from (.describe(), .meta(), .refine()). */
export function documentationOf(schema: z.core.$ZodType): z.ZodType | undefined {
  for (let s: z.core.$ZodType | undefined = schema; s !== undefined; s = s._zod.parent) {
    const doc = documentation.get(s);
    if (doc !== undefined) return doc;
  }
  return undefined;
}
