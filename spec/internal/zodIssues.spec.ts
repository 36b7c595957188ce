import { z } from 'zod';
import { zodIssues } from '../../src/internal/zodIssues';

describe('zodIssues', () => {
  it('is zod’s readable form of every issue, on one line', () => {
    const parsed = z.object({ name: z.string(), age: z.number() }).safeParse({ name: 1, age: 'x' });
    expect(parsed.success).toBe(false);
    const line = zodIssues(parsed.error!);
    expect(line).not.toContain('\n');
    expect(line).toBe('✖ Invalid input: expected string, received number;   → at name; ✖ Invalid input: expected number, received string;   → at age');
    expect(line).toMatch(/at name/);
    expect(line).toMatch(/at age/);
  });
});
