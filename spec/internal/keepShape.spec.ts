import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

describe('keepShape', () => {
  it('keeps the optimized code that reads a class through a full GC that finds no other instance', () => {
    const probe = join(__dirname, 'fixtures', 'keepShapeProbe.ts');
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--allow-natives-syntax', '--expose-gc', probe], { encoding: 'utf8' });
    const { before, after } = JSON.parse(out.trim().split('\n').at(-1)!) as Record<'before' | 'after', { kept: boolean; lost: boolean }>;
    expect(before).toEqual({ kept: true, lost: true });
    // Without a kept instance the class's map dies with its last object, and the code with it.
    expect(after).toEqual({ kept: true, lost: false });
  });
});
