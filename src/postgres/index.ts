/**
 * An `AgentStore` on PostgreSQL, through `pg` (an optional peer dependency): durable runs,
 * answers, cancels, leases and sessions shared by every process on one database.
 *
 * @module rx-agent/postgres
 */
export type { PgPool, PgPoolClient, PgResult } from './pgPool';
export { postgresStore, type PostgresStore, type PostgresStoreOptions, type MigrationResult, type SweepResult } from './postgresStore';
