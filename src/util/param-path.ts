// How the API names a field inside a request: ['events', 3, 'occurred_at'] -> 'events[3].occurred_at';
// keys that are not identifiers are quoted: a["x.y"]. One definition for validation errors,
// rule problems and match-profile problems alike. Pure.

const identifier = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else {
      const key = typeof seg === 'symbol' ? String(seg.description ?? '') : seg;
      if (identifier.test(key)) out += out.length === 0 ? key : `.${key}`;
      else out += `[${JSON.stringify(key)}]`;
    }
  }
  return out;
}
