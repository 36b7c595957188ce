/**
 * The configuration of PII detection: strategies, rules and custom detectors, validated once by
 * {@link resolvePiiConfig} into an immutable {@link PiiConfig}.
 *
 * Rules: every built-in type is active with its default strategy ({@link DEFAULT_PII_RULES}) unless
 * `rules` gives it another one, or `false` to turn it off (so a rule for one type never turns off
 * the blocking of another; entries whose value is `undefined` keep the default).
 * `custom` detectors are always active, after the built-in ones.
 */
import { isArray } from '../../../src/internal/isArray';
import { checkNestedOptionNames, optionNames } from '../checkOptions';
import { BUILTINS, customContinues, customFinder, isSafeBoundary, PII_TYPES, RUN_CHARS, type PiiDetectorFn, type PiiSpan, type PiiType } from './detectors';

/**
 * The strategies: `redact` → `[REDACTED_EMAIL]`, `mask` → `u***@example.com`, `hash` →
 * `<ip_hash:1a2b3c4d>`, `block` → throw a `PiiDetectedError`.
 *
 * @example
 * PII_STRATEGIES.includes('mask'); // true
 */
export const PII_STRATEGIES = ['redact', 'mask', 'hash', 'block'] as const;

/**
 * What to do with a detected value.
 *
 * @example
 * const strategy: PiiStrategy = 'hash';
 */
export type PiiStrategy = (typeof PII_STRATEGIES)[number];

/**
 * The strategy of every built-in type that `rules` does not mention.
 *
 * @example
 * DEFAULT_PII_RULES.creditCard; // 'block'
 */
export const DEFAULT_PII_RULES: Readonly<Record<PiiType, PiiStrategy>> = Object.freeze({
  email: 'redact',
  creditCard: 'block',
  ssn: 'block',
  phone: 'mask',
  ip: 'hash',
  mac: 'redact',
  url: 'redact',
  apiKey: 'redact',
});

/**
 * A user-defined PII type. A `RegExp` finds every match whether or not it has the `g` flag (it is
 * copied, so the caller's `lastIndex` is never touched); empty matches are ignored. `strategy`
 * defaults to `redact`.
 *
 * @example
 * const employeeId: CustomPiiDetector = { name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'redact' };
 */
export interface CustomPiiDetector {
  name: string;
  detector: RegExp | PiiDetectorFn;
  strategy?: PiiStrategy;
}

/** The keys of a {@link CustomPiiDetector}: any other is refused (a misspelt `strategy` would fall back to `redact`). */
const CUSTOM_DETECTOR_OPTIONS = optionNames<CustomPiiDetector>({ name: true, detector: true, strategy: true });

/**
 * The options of `piiRedaction` that drive detection (see the module comment for how `rules`
 * changes the default strategies).
 *
 * @example
 * const options: PiiOptions = { rules: { email: 'mask', ip: 'hash' }, custom: [employeeId] };
 */
export interface PiiOptions {
  rules?: Partial<Record<PiiType, PiiStrategy | false>>;
  custom?: ReadonlyArray<CustomPiiDetector>;
}

/**
 * @internal One active detector of a resolved config (its priority is its index in `detectors`).
 *
 * @example
 * resolvePiiConfig({}).detectors.find((d) => d.type === 'ip')!.find('at 10.0.0.1'); // [{ start: 3, end: 11 }]
 */
export interface PiiDetectorEntry {
  readonly type: string;
  readonly strategy: PiiStrategy;
  readonly custom: boolean;
  readonly find: (text: string) => PiiSpan[];
  /** Characters that may still belong to a value cut by a forced stream emission. */
  readonly continues: (code: number) => boolean;
  /** ASCII digits every value holds (0 for custom types): a text with fewer is not searched. */
  readonly minDigits: number;
}

/**
 * A validated, immutable detection config, made by {@link resolvePiiConfig}. `active` lists the
 * active types in priority order with their strategies.
 *
 * @example
 * const config: PiiConfig = resolvePiiConfig({ rules: { email: 'mask', phone: false } });
 * config.active; // [{ type: 'email', strategy: 'mask' }, { type: 'creditCard', strategy: 'block' }, …] (no phone)
 */
export interface PiiConfig {
  readonly kind: 'PiiConfig';
  readonly active: ReadonlyArray<{ readonly type: string; readonly strategy: PiiStrategy }>;
  /** @internal */
  readonly detectors: ReadonlyArray<PiiDetectorEntry>;
  /** @internal True when a custom detector is active (no structural fast path then). */
  readonly hasCustom: boolean;
  /**
   * @internal Per ASCII char: 1 = a built-in value needs it, 2 = api-key/mac run char,
   * 4 = always a safe stream boundary, 8 = space.
   */
  readonly triggers: Uint8Array;
  /** @internal Length of a [A-Za-z0-9_-] run that may be a value (Infinity when irrelevant). */
  readonly runMin: number;
}

function isStrategy(s: unknown): s is PiiStrategy {
  return typeof s === 'string' && (PII_STRATEGIES as readonly string[]).includes(s);
}

function isBuiltinType(s: string): s is PiiType {
  return (PII_TYPES as readonly string[]).includes(s);
}

/**
 * Validates `{ rules?, custom? }` into a {@link PiiConfig}. Every built-in type is active with its
 * default strategy unless `rules` gives another strategy or `false` (off). Throws a `TypeError`
 * for an unknown type or strategy, a custom detector without a name, with a duplicate or built-in
 * name, or without a RegExp/function detector.
 *
 * @example
 * const config = resolvePiiConfig({ rules: { email: 'mask' }, custom: [{ name: 'employeeId', detector: /EMP-\d{6}/, strategy: 'hash' }] });
 */
export function resolvePiiConfig(options: PiiOptions = {}): PiiConfig {
  if (options === null || typeof options !== 'object') throw new TypeError('PII options must be an object');
  const { rules, custom = [] } = options;
  if (rules !== undefined && (rules === null || typeof rules !== 'object' || Array.isArray(rules))) {
    throw new TypeError('PII `rules` must be an object mapping a PII type to a strategy');
  }
  if (!isArray(custom)) throw new TypeError('PII `custom` must be an array of { name, detector, strategy }');

  if (rules !== undefined) {
    for (const [type, strategy] of Object.entries(rules)) {
      if (!isBuiltinType(type)) {
        throw new TypeError(`Unknown PII type "${type}" in rules; expected one of: ${PII_TYPES.join(', ')}`);
      }
      if (strategy !== undefined && strategy !== false && !isStrategy(strategy)) {
        throw new TypeError(
          `Unknown strategy "${String(strategy)}" for PII type "${type}"; expected one of: ${PII_STRATEGIES.join(', ')}, or false to turn the type off`,
        );
      }
    }
  }

  const detectors: PiiDetectorEntry[] = [];
  const triggers = new Uint8Array(128);
  let runMin = Infinity;
  for (const type of PII_TYPES) {
    const strategy = rules?.[type] ?? DEFAULT_PII_RULES[type];
    if (strategy === false) continue;
    const spec = BUILTINS[type];
    detectors.push(Object.freeze({ type, strategy, custom: false, find: spec.find, continues: spec.continues, minDigits: spec.minDigits }));
    for (let i = 0; i < spec.triggers.length; i++) triggers[spec.triggers.charCodeAt(i)] |= 1;
    runMin = Math.min(runMin, spec.runMin);
  }
  if (runMin !== Infinity) {
    for (let c = 0; c < 128; c++) if (RUN_CHARS.test(String.fromCharCode(c))) triggers[c] |= 2;
  }
  // Stream boundaries (see isSafeBoundary): 4 = always safe after it, 8 = space.
  for (let c = 0; c < 128; c++) if (c !== 32 && isSafeBoundary(c, 32)) triggers[c] |= 4;
  triggers[32] |= 8;

  const names = new Set<string>();
  custom.forEach((entry, index) => {
    if (entry === null || typeof entry !== 'object') throw new TypeError(`Custom PII detector at index ${index} must be an object`);
    checkNestedOptionNames('piiRedaction', `custom[${index}]`, entry, CUSTOM_DETECTOR_OPTIONS);
    const { name, detector, strategy = 'redact' } = entry;
    if (typeof name !== 'string' || name.trim() === '') {
      throw new TypeError(`Custom PII detector at index ${index} has no name`);
    }
    if (toUpperSnake(name) === '') throw new TypeError(`Custom PII detector name "${name}" needs a letter or digit`);
    if (isBuiltinType(name)) throw new TypeError(`Custom PII detector "${name}" has the name of a built-in type`);
    if (names.has(name)) throw new TypeError(`Custom PII detector "${name}" is defined twice`);
    names.add(name);
    if (!(detector instanceof RegExp) && typeof detector !== 'function') {
      throw new TypeError(`Custom PII detector "${name}" needs a RegExp or a function (text) => Array<{ start, end }>`);
    }
    if (!isStrategy(strategy)) {
      throw new TypeError(`Unknown strategy "${String(strategy)}" for custom PII detector "${name}"; expected one of: ${PII_STRATEGIES.join(', ')}`);
    }
    detectors.push(Object.freeze({ type: name, strategy, custom: true, find: customFinder(name, detector), continues: customContinues, minDigits: 0 }));
  });

  return Object.freeze({
    kind: 'PiiConfig' as const,
    active: Object.freeze(detectors.map((d) => Object.freeze({ type: d.type, strategy: d.strategy }))),
    detectors: Object.freeze(detectors),
    hasCustom: names.size > 0,
    triggers,
    runMin,
  });
}

const DEFAULT_CONFIG = resolvePiiConfig();

/** `config` as a resolved config (the default one when undefined). */
export function toConfig(config: PiiConfig | PiiOptions | undefined): PiiConfig {
  if (config === undefined) return DEFAULT_CONFIG;
  return (config as Partial<PiiConfig>).kind === 'PiiConfig' ? (config as PiiConfig) : resolvePiiConfig(config as PiiOptions);
}

/** Whether `text` holds a character/run that a value of an active built-in type needs. */
export function mayHoldPii(text: string, config: PiiConfig): boolean {
  const table = config.triggers;
  const runMin = config.runMin;
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const k = c < 128 ? table[c] : 0;
    if (k & 1) return true;
    if (k & 2) {
      if (++run >= runMin) return true;
    } else run = 0;
  }
  return false;
}

/**
 * `creditCard` → `CREDIT_CARD`, `apiKey` → `API_KEY`, `employee-id` → `EMPLOYEE_ID`.
 *
 * @example
 * toUpperSnake('employeeId'); // 'EMPLOYEE_ID'
 */
export function toUpperSnake(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .replace(/[^A-Za-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .toUpperCase();
}
