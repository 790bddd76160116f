// Method + path lookup over a segment trie: static segments beat `:param` segments, with
// backtracking, so '/v1/customers/search' and '/v1/customers/:id' coexist. Lookup walks the path
// once with indexOf (no split, no regex) and allocates only the params object of a match.
// Param names live on the route, not the trie node, so sibling routes may name a position
// differently. Never decides status codes: a miss is null and the server answers route_not_found.

interface Terminal<T> {
  value: T;
  pattern: string;
  paramNames: readonly string[];
}

class TrieNode<T> {
  readonly statics = new Map<string, TrieNode<T>>();
  param: TrieNode<T> | null = null;
  readonly methods = new Map<string, Terminal<T>>();
}

export interface RouteMatch<T> {
  value: T;
  /** The registered pattern, e.g. '/v1/customers/:id' (metrics label, never the raw path). */
  pattern: string;
  params: Record<string, string>;
}

/** Segments of a pattern or path without the leading '/'; '/' alone has one empty segment. */
function segmentsOf(pattern: string): string[] {
  if (!pattern.startsWith('/')) throw new Error(`route pattern must start with '/': ${pattern}`);
  return pattern.slice(1).split('/');
}

const noParams: readonly string[] = [];

export class Router<T> {
  private readonly root = new TrieNode<T>();
  private readonly list: Array<{ method: string; pattern: string; value: T }> = [];

  /** Registers a route; throws when the same method and shape is already registered. */
  add(method: string, pattern: string, value: T): void {
    let node = this.root;
    const names: string[] = [];
    for (const seg of segmentsOf(pattern)) {
      if (seg.startsWith(':')) {
        const name = seg.slice(1);
        if (name.length === 0) throw new Error(`empty param name in ${pattern}`);
        if (names.includes(name)) throw new Error(`duplicate param :${name} in ${pattern}`);
        names.push(name);
        node.param ??= new TrieNode<T>();
        node = node.param;
      } else {
        let next = node.statics.get(seg);
        if (next === undefined) {
          next = new TrieNode<T>();
          node.statics.set(seg, next);
        }
        node = next;
      }
    }
    const existing = node.methods.get(method);
    if (existing !== undefined) {
      throw new Error(`route conflict: ${method} ${pattern} and ${method} ${existing.pattern}`);
    }
    node.methods.set(method, { value, pattern, paramNames: names.length === 0 ? noParams : names });
    this.list.push({ method, pattern, value });
  }

  /** Everything registered, in registration order (OpenAPI generation). */
  routes(): ReadonlyArray<{ method: string; pattern: string; value: T }> {
    return this.list;
  }

  /**
   * Finds the route for a method and a raw path (no query string). Param values are
   * percent-decoded; a malformed escape makes the path unmatched rather than throwing.
   */
  find(method: string, path: string): RouteMatch<T> | null {
    if (path.length === 0 || path.charCodeAt(0) !== 47 /* '/' */) return null;
    const values: string[] = [];
    const terminal = this.walk(this.root, path, 1, method, values);
    if (terminal === null) return null;
    const names = terminal.paramNames;
    if (names.length === 0) return { value: terminal.value, pattern: terminal.pattern, params: {} };
    const params: Record<string, string> = {};
    for (let i = 0; i < names.length; i++) {
      let v = values[i]!;
      if (v.includes('%')) {
        try {
          v = decodeURIComponent(v);
        } catch {
          return null;
        }
      }
      params[names[i]!] = v;
    }
    return { value: terminal.value, pattern: terminal.pattern, params };
  }

  private walk(node: TrieNode<T>, path: string, from: number, method: string, values: string[]): Terminal<T> | null {
    let end = path.indexOf('/', from);
    if (end < 0) end = path.length;
    const seg = path.slice(from, end);
    const last = end === path.length;

    const stat = node.statics.get(seg);
    if (stat !== undefined) {
      const hit = last ? (stat.methods.get(method) ?? null) : this.walk(stat, path, end + 1, method, values);
      if (hit !== null) return hit;
    }
    // A param matches one non-empty segment.
    if (node.param !== null && seg.length > 0) {
      values.push(seg);
      const hit = last ? (node.param.methods.get(method) ?? null) : this.walk(node.param, path, end + 1, method, values);
      if (hit !== null) return hit;
      values.pop();
    }
    return null;
  }
}
