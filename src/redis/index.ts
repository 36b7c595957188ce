// `rx-agent/redis`: an AgentStore on Redis, through ioredis (an optional peer dependency).
export { redisStore, type RedisStoreOptions } from './redisStore';
