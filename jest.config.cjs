const { entries } = require('./scripts/entries.json');

/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/spec'],
  testMatch: ['**/*.spec.ts'],
  transform: {
    // Transpile only (isolatedModules in the tsconfig below; types are checked by `npm run
    // typecheck`); CommonJS for jest.
    '^.+\\.tsx?$': [
      'ts-jest',
      {
        tsconfig: {
          target: 'es2022',
          module: 'commonjs',
          moduleResolution: 'node',
          esModuleInterop: true,
          useDefineForClassFields: false,
          isolatedModules: true,
        },
      },
    ],
  },
  // `rx-agent` and `rx-agent/<entry>` resolve to their sources (scripts/entries.json lists them).
  moduleNameMapper: Object.fromEntries(
    Object.entries(entries).map(([name, { source }]) => [name === '.' ? '^rx-agent$' : `^rx-agent/${name}$`, `<rootDir>/${source}`]),
  ),
  reporters: ['default', '<rootDir>/spec/support/summaryReporter.cjs'],
  setupFilesAfterEnv: ['<rootDir>/spec/setup.ts'],
  testTimeout: 20000,
};
