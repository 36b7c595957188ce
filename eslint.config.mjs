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
  },
);
