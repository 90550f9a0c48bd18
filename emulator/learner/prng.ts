/**
 * Counter-based randomness: every value is a pure function of (key, counter), so a token's frozen parameters can
 * be derived from (seed, tokenId) on demand and no vocabulary-sized table ever exists.
 */

/** murmur3's 32-bit finaliser: a bijective avalanche mix. */
function fmix32(value: number): number {
  let h = value >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Folds integers (any safe integer, negative included) and strings into one 32-bit key. */
export function hashKey(...parts: Array<number | string>): number {
  let h = 0x9e3779b9;
  const absorb = (word: number) => {
    h = fmix32((h ^ fmix32(word + 0x632be5ab)) + 0x9e3779b9);
  };
  for (const part of parts) {
    if (typeof part === 'string') {
      for (let i = 0; i < part.length; i++) absorb(part.charCodeAt(i));
      absorb(part.length);
    } else {
      absorb(part >>> 0);
      absorb(Math.floor(part / 0x100000000) >>> 0);
    }
  }
  return h;
}

/** The counter-th uniform draw in [0, 1) of a key, with 32 bits of resolution. */
function uniformAt(key: number, counter: number): number {
  return fmix32(key ^ fmix32(counter * 0x9e3779b9 + 0x7f4a7c15)) / 0x100000000;
}

/** `count` standard normal values of a key (Box–Muller over consecutive counters). */
export function gaussianVector(key: number, count: number, scale = 1): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i += 2) {
    const u1 = 1 - uniformAt(key, i); // (0, 1]: log stays finite
    const u2 = uniformAt(key, i + 1);
    const radius = Math.sqrt(-2 * Math.log(u1)) * scale;
    out[i] = radius * Math.cos(2 * Math.PI * u2);
    if (i + 1 < count) out[i + 1] = radius * Math.sin(2 * Math.PI * u2);
  }
  return out;
}

/** A seeded stream of uniform doubles in [0, 1) (53-bit), for sampling; never Math.random. */
export class RandomStream {
  private counter = 0;

  constructor(private readonly key: number) {}

  next(): number {
    const high = uniformAt(this.key, this.counter++) * 0x200000; // 21 bits
    const low = uniformAt(this.key, this.counter++);
    return (Math.floor(high) + low) / 0x200000;
  }

  /** A uniform integer in [0, bound). */
  below(bound: number): number {
    return Math.min(bound - 1, Math.floor(this.next() * bound));
  }
}
