import type { Role } from '../../src/index';

/** What `textMessage(role, text)` makes, with any id: an expectation for a message made elsewhere. */
export function textLike(role: Role, text: string): { id: unknown; role: Role; content: Array<{ type: 'text'; text: string }> } {
  return { id: expect.any(String), role, content: [{ type: 'text', text }] };
}
