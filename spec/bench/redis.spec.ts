import type Redis from 'ioredis';
import { loadFiveOperators } from '../../bench/lib/operators';
import { s1Journaled } from '../../bench/workloads/redis';
import { s2Run } from '../../bench/workloads/s2';
import { redisStore } from '../../src/redis/index';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';

// The Redis workloads of the bench at small sizes: they pass with the five operators, journaled
// on a real Redis, and check their own results.
let client: Redis;
const prefix = uniquePrefix('bench');

beforeAll(async () => {
  client = await connectRedis();
});

afterAll(async () => {
  await deleteKeys(client, prefix);
  await client.quit();
});

describe('bench workloads on redisStore', () => {
  it('S1 and S2 pass with the five operators', async () => {
    const five = loadFiveOperators().map((o) => o.middleware);
    await expect(s1Journaled(client, prefix, five, 1000)()).resolves.toBeUndefined();
    await expect(s2Run(five, 20, redisStore({ client, prefix, retainMs: 0 }))()).resolves.toBeUndefined();
    // retainMs 0: the finished runs left nothing behind but their tails, which expire within 10 s.
    const left = await client.keys(`${prefix}run:*`);
    expect(left.filter((key) => !key.endsWith(':tail'))).toEqual([]);
    for (const key of left) expect(await client.pttl(key)).toBeGreaterThan(0);
  });
});
