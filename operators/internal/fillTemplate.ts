/**
 * `message` with each `{name}` of `values` replaced by its value, in one pass: a value is inserted
 * as is (no `$&` patterns, and a placeholder inside a value is not filled). Other braces are kept.
 *
 * @example
 * fillTemplate('Stopped after {count} errors: {lastError}', { count: '3', lastError: 'boom' });
 */
export function fillTemplate(message: string, values: Readonly<Record<string, string>>): string {
  return message.replace(/\{(\w+)\}/g, (match, name: string) => (Object.hasOwn(values, name) ? values[name] : match));
}
