// An agent on redisStore, in one process (spec/support/agentOnStore.ts).
import type Redis from 'ioredis';
import { redisStore } from 'rx-agent/redis';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';
import { describeAgentOnStore } from '../support/agentOnStore';

let client: Redis;
const prefix = uniquePrefix('durableAgent');

beforeAll(async () => {
  client = await connectRedis();
});

afterAll(async () => {
  await deleteKeys(client, prefix);
  await client.quit();
});

describeAgentOnStore('redisStore', () => redisStore({ client, prefix }));
