/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/spec'],
  testMatch: ['**/*.spec.ts'],
  transform: {
    '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022', parser: { syntax: 'typescript' }, transform: { useDefineForClassFields: false } }, module: { type: 'commonjs' } }],
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
