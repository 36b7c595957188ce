// ESLint with typescript-eslint's type-checked recommended rules, run by `npm run lint`.
import eslint from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

export default defineConfig(
  // bench/peers is a package of its own (its own dependencies and tsconfig); spec/dist/consumer*
  // compile against the built package.
  { ignores: ['dist/', 'coverage/', 'docs/api/', 'bench/results/', 'bench/peers/', 'spec/dist/consumer/', 'spec/dist/consumer-cjs/'] },
  {
    files: ['**/*.ts'],
    extends: [eslint.configs.recommended, tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // A `let` that a closure reads before its one assignment stays a `let` (a `const` would throw there).
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // A parameter named `_x` is there for its position only; a `...rest` sibling is named to be left out.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', ignoreRestSiblings: true }],
      // A Promise bridging a stream rejects with what the stream errored with, of whatever type (as only-throw-error lets a caught value be rethrown).
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingAny: true, allowThrowingUnknown: true }],
      // HookFailure is not an Error: it carries a hook's failure, with the middleware's name, to the run that reports it.
      '@typescript-eslint/only-throw-error': ['error', { allow: [{ from: 'file', name: 'HookFailure', path: 'src/middleware/types.ts' }] }],
    },
  },
  {
    files: ['spec/**/*.ts'],
    rules: {
      // jest's asymmetric matchers (expect.objectContaining, stringMatching, any, ...) and rxjs's error
      // callbacks are typed any; specs read parsed JSON and module copies loaded with require().
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      // Specs make async fixtures (async generators as streams, Promise-returning fakes) that await nothing.
      '@typescript-eslint/require-await': 'off',
      // Failure messages print whatever a run threw, a value of unknown type.
      '@typescript-eslint/no-base-to-string': 'off',
    },
  },
);
