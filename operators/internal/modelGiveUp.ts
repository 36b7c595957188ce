import type { Message } from '../../src/index';

/** The answer `modelRetry({ onFailure: 'continue' })` ends an iteration with (its text is in docs/guide/operators.md, modelRetry). */
export function giveUpText(attempts: number, message: string): string {
  return `Model call failed after ${attempts} attempts: ${message}`;
}

const GIVE_UP = /^Model call failed after \d+ attempts: /;

/**
 * Whether `response` is such an answer: one text part with that text (the failed attempts' partial
 * output is dropped before it). What a cache must not keep: it stands for a failure, not for an
 * answer to the request. A model that answered those very words is only not cached.
 */
export function isGiveUpResponse(response: Message): boolean {
  const { content } = response;
  return content.length === 1 && content[0].type === 'text' && GIVE_UP.test(content[0].text);
}
