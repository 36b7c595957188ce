// Durable runs across real processes on Redis: child Node processes run (or are killed running)
// a run; this process resumes, answers, cancels and reads it, through redisStore.
import { join } from 'node:path';
import type Redis from 'ioredis';
import { redisStore } from '../../src/redis/index';
import { describeCrossProcess } from '../support/crossProcess';
import { connectRedis, deleteKeys, REDIS_URL, uniquePrefix } from '../support/redis';
import { counterKey, durableAgent } from './fixtures/durableRuns';

let client: Redis;
let prefix: string;

describeCrossProcess({
  worker: join(__dirname, 'fixtures', 'worker.ts'),
  setup: async () => {
    client = await connectRedis();
    prefix = uniquePrefix('crossProcess');
  },
  teardown: async () => {
    await deleteKeys(client, prefix);
    await client.quit();
  },
  childOptions: () => ({ url: REDIS_URL, prefix }),
  agent: (options) => durableAgent({ ...options, client, prefix }),
  store: () => redisStore({ client, prefix }),
  executed: async (runId, tool) => Number((await client.get(counterKey(prefix, runId, tool))) ?? 0),
});
