import { sha256 } from '@noble/hashes/sha2';
import { bytesToHex } from '@noble/hashes/utils';

interface NodeHash {
  update(text: string, encoding: 'utf8'): NodeHash;
  digest(encoding: 'hex'): string;
}

/**
 * Node's own `crypto`, taken with `process.getBuiltinModule` (Node 20.16+) rather than imported,
 * so that the operators also load in a browser (where a bundler cannot resolve `node:crypto`).
 */
const nodeCrypto = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule?.('node:crypto') as
  { createHash(algorithm: 'sha256'): NodeHash } | undefined;

/** SHA-256 of the UTF-8 bytes of `text`, in the portable implementation (browsers, older Node). */
export function portableSha256Hex(text: string): string {
  return bytesToHex(sha256(text));
}

/** SHA-256 of the UTF-8 bytes of `text` as 64 hex digits: Node's native hash where there is one. */
export const sha256Hex: (text: string) => string = nodeCrypto
  ? (text) => nodeCrypto.createHash('sha256').update(text, 'utf8').digest('hex')
  : portableSha256Hex;
