import { NEVER } from 'rxjs';
import { createAgent, createSession, InMemorySessionStore, memoryStore } from '../../src/index';
import { scriptedModel } from '../../src/testing/index';
import { runsClient, runsHandler, toSSEStream } from '../../src/http/index';
import { agUiHandler, toAgUi } from '../../src/ag-ui/index';
import { aiSdkHandler, toUIMessageStream } from '../../src/ai-sdk/index';
import { mcpTools, type McpClient } from '../../src/mcp/index';
import { telemetry } from '../../src/otel/index';
import { postgresStore } from '../../src/postgres/index';
import { openAIChat, openAIResponses } from '../../src/openai/index';
import { checkOptionNames, checkOptions, checkOptionsObject } from '../../src/internal/optionNames';

const known = ['a', 'b'];

describe('checkOptionsObject', () => {
  it('accepts any object that is not an array, whatever its keys', () => {
    expect(() => checkOptionsObject('f', {})).not.toThrow();
    expect(() => checkOptionsObject('f', { a: 1, z: null })).not.toThrow();
    expect(() => checkOptionsObject('f', Object.create(null) as object)).not.toThrow();
  });

  it.each([
    [undefined, 'undefined'],
    [null, 'null'],
    [[], '[]'],
    [[1, 'a'], '[1,"a"]'],
    ['fast', '"fast"'],
    [0, '0'],
    [false, 'false'],
    [() => ({}), 'a function'],
    [Symbol('s'), 'Symbol(s)'],
    [10n, '10'],
  ])('refuses %p, showing it', (options, shown) => {
    expect(() => checkOptionsObject('f', options)).toThrow(new TypeError(`f: options must be an object, got ${shown}`));
  });

  it('says what the object must hold when told', () => {
    expect(() => checkOptionsObject('f', undefined, "with 'a' and 'b'")).toThrow(new TypeError("f: options must be an object with 'a' and 'b', got undefined"));
    expect(() => checkOptionsObject('f', { a: 1 }, "with 'a' and 'b'")).not.toThrow();
  });
});

describe('checkOptions', () => {
  it('refuses what is not an object first, then an unknown option, in the words of checkOptionNames', () => {
    expect(() => checkOptions('f', null, known)).toThrow(new TypeError('f: options must be an object, got null'));
    expect(() => checkOptions('f', ['a'], known)).toThrow(new TypeError('f: options must be an object, got ["a"]'));
    expect(() => checkOptions('f', undefined, known, "with 'a'")).toThrow(new TypeError("f: options must be an object with 'a', got undefined"));
    expect(() => checkOptions('f', { a: 1, c: 2, d: 3 }, known)).toThrow(new TypeError("f: unknown option(s) 'c', 'd' (known: a, b)"));
    expect(() => checkOptionNames('f', { c: 2, d: 3 }, known)).toThrow(new TypeError("f: unknown option(s) 'c', 'd' (known: a, b)"));
  });

  it("checks the names only: a null or undefined option is the factory's to judge", () => {
    expect(() => checkOptions('f', {}, known)).not.toThrow();
    expect(() => checkOptions('f', { a: null, b: undefined }, known)).not.toThrow();
  });
});

describe("every factory's options that are not an object: one message", () => {
  const agent = createAgent({ model: scriptedModel(['hi']), store: memoryStore() });
  const client = { listTools: () => Promise.resolve({ tools: [] }), callTool: () => Promise.resolve({ content: [] }) } as unknown as McpClient;
  // [owner, factory given the options, what the message adds] (each row of 3: jest takes a missing last one for `done`)
  const table: Array<[owner: string, make: (options: unknown) => unknown, shape: string | undefined]> = [
    ['createAgent', (o) => createAgent(o as never), undefined],
    ['createSession', (o) => createSession(o as never), undefined],
    ['memoryStore', (o) => memoryStore(o as never), undefined],
    ['InMemorySessionStore', (o) => new InMemorySessionStore(o as never), undefined],
    ['scriptedModel', (o) => scriptedModel([], o as never), undefined],
    ['telemetry', (o) => telemetry(o as never), undefined],
    ['runsClient', (o) => runsClient('/runs', o as never), undefined],
    ['runsHandler', (o) => runsHandler(agent, o as never), undefined],
    ['toSSEStream', (o) => toSSEStream(NEVER, o as never), undefined],
    ['toAgUi', (o) => toAgUi(o as never), undefined],
    ['agUiHandler', (o) => agUiHandler(agent, o as never), undefined],
    ['toUIMessageStream', (o) => toUIMessageStream(o as never), undefined],
    ['aiSdkHandler', (o) => aiSdkHandler(agent, o as never), undefined],
    ['mcpTools', (o) => mcpTools(client, o as never), undefined],
    ['postgresStore', (o) => postgresStore(o as never), undefined],
    ['openAIChat', (o) => openAIChat(o as never), "with 'client' and 'model'"],
    ['openAIResponses', (o) => openAIResponses(o as never), "with 'client' and 'model'"],
    ['asTool', (o) => agent.asTool(o as never), "with 'name' and 'description'"],
  ];

  it.each(table)('%s', (owner, make, shape) => {
    const must = `${owner}: options must be an object${shape === undefined ? '' : ` ${shape}`}, got`;
    expect(() => make(null)).toThrow(new TypeError(`${must} null`));
    expect(() => make([])).toThrow(new TypeError(`${must} []`));
    expect(() => make('x')).toThrow(new TypeError(`${must} "x"`));
    expect(() => make(() => ({}))).toThrow(new TypeError(`${must} a function`));
  });

  it.each(table.filter(([owner]) => !['createAgent', 'openAIChat', 'openAIResponses'].includes(owner)))('%s refuses an unknown option too', (owner, make) => {
    expect(() => make({ misspelt: 1 })).toThrow(new RegExp(`^${owner}: unknown option\\(s\\) 'misspelt' \\(known: `));
  });
});
