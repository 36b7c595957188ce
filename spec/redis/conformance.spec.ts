import type Redis from 'ioredis';
import { describeStoreConformance } from 'rx-agent/testing';
import { redisStore } from 'rx-agent/redis';
import { connectRedis, deleteKeys, uniquePrefix } from '../support/redis';

// The AgentStore contract, on a real Redis: every test of the suite gets a store of its own on a
// client of its own (closed after it), under this file's key prefix.
const prefix = uniquePrefix('conformance');
const clients = new Map<object, Redis>();

afterAll(async () => {
  const admin = await connectRedis();
  await deleteKeys(admin, prefix);
  await admin.quit();
});

const teardown = async (store: object) => {
  await clients.get(store)?.quit();
  clients.delete(store);
};

describeStoreConformance(
  'redisStore',
  async () => {
    const client = await connectRedis();
    const store = redisStore({ client, prefix });
    clients.set(store, client);
    return store;
  },
  { teardown },
);

// A run kept for no time after its end: the contract holds too (a follower subscribed before the
// end gets it, however late its pub/sub subscription is confirmed).
describeStoreConformance(
  'redisStore, retainMs 0',
  async () => {
    const client = await connectRedis();
    const store = redisStore({ client, prefix, retainMs: 0 });
    clients.set(store, client);
    return store;
  },
  { teardown },
);
