import { PII_TYPES } from '../../../../operators/internal/pii/detectors';
import { findPii } from '../../../../operators/internal/pii/findPii';
import type { PiiOptions } from '../../../../operators/internal/pii/config';

/** Rules that turn every built-in type off. */
export const NONE = Object.fromEntries(PII_TYPES.map((type) => [type, false])) as Record<(typeof PII_TYPES)[number], false>;

/** Every built-in type, none blocking (so whole texts can be redacted). */
export const ALL: PiiOptions = {
  rules: { email: 'redact', creditCard: 'mask', ssn: 'redact', phone: 'mask', ip: 'hash', mac: 'redact', url: 'redact', apiKey: 'redact' },
};

/** The [type, value] of every value found in `text`. */
export const types = (text: string, options: PiiOptions = ALL) => findPii(text, options).map((m) => [m.type, m.value]);

/** The values of `type` found in `text` with every type active. */
export const only = (type: string, text: string) =>
  findPii(text, ALL)
    .filter((m) => m.type === type)
    .map((m) => m.value);
