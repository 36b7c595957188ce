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
        tsconfig: { target: 'es2022', module: 'commonjs', moduleResolution: 'node', esModuleInterop: true, useDefineForClassFields: false, isolatedModules: true },
      },
    ],
  },
  moduleNameMapper: {
    '^rx-agent$': '<rootDir>/src/index.ts',
    '^rx-agent/operators$': '<rootDir>/operators/index.ts',
    '^rx-agent/testing$': '<rootDir>/src/testing/index.ts',
  },
  reporters: ['default', '<rootDir>/spec/support/summaryReporter.cjs'],
  setupFilesAfterEnv: ['<rootDir>/spec/setup.ts'],
  testTimeout: 20000,
};
