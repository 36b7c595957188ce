import type { Observable } from 'rxjs';
import type { Message } from '../messages/message';

/** What the model sees of a tool: its name, description and JSON Schema parameters. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly parameters: Record<string, unknown>;
}

/** Which tool the model may or must call. */
export type ToolChoice = 'auto' | 'none' | 'required' | { readonly name: string };

/** Model settings; adapters pass unknown keys through to the provider. */
export interface ModelSettings {
  model?: string;
  temperature?: number;
  maxTokens?: number;
  [key: string]: unknown;
}

/**
 * The structured output a request asks for: the final answer is JSON that fits `schema`. An adapter
 * sends it the way its API takes it (`openAIChat`: `response_format: { type: 'json_schema' }`, or a
 * tool named `name` that the model must call).
 *
 * @example
 * const output: OutputFormat = { name: 'final_answer', schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false }, strict: true };
 */
export interface OutputFormat {
  /** A name for the schema (`^[a-zA-Z0-9_-]{1,64}$`): the schema's `title`, else `final_answer`. */
  readonly name: string;
  /** The schema's `description`, if it has one. */
  readonly description?: string;
  /** The JSON Schema of the answer (an object). */
  readonly schema: Record<string, unknown>;
  /**
   * True when the schema meets OpenAI's strict mode (every property required, no additional
   * properties, at every level): the provider then guarantees the answer fits it.
   */
  readonly strict: boolean;
}

/**
 * One model call's input.
 *
 * @example
 * const request: ModelRequest = { messages: [textMessage('user', 'Hi')], tools: [], settings: {} };
 */
export interface ModelRequest {
  /**
   * The history, oldest first. In a run's request it is the run's own array, not a copy: read it
   * during the call; the run appends to it once the call is over, so copy what you keep
   * (`[...request.messages]`). Reading `request.messages` again later gives the messages as they
   * were for this call.
   */
  readonly messages: readonly Message[];
  readonly instructions?: string;
  readonly tools: readonly ToolSpec[];
  readonly toolChoice?: ToolChoice;
  readonly settings: ModelSettings;
  /** Set when the run asks for structured output (`createAgent({ output })`). */
  readonly output?: OutputFormat;
}

/** Why a model stopped. */
export type FinishReason = 'stop' | 'tool-calls' | 'length' | 'content-filter';

/** One piece of a streamed model answer. */
export type ModelUpdate =
  | { readonly type: 'text-delta'; readonly text: string }
  | { readonly type: 'reasoning-delta'; readonly text: string }
  | {
      readonly type: 'tool-call-delta';
      readonly index: number;
      readonly callId?: string;
      readonly name?: string;
      readonly argsDelta: string;
    }
  | { readonly type: 'usage'; readonly inputTokens: number; readonly outputTokens: number }
  | {
      readonly type: 'finish';
      readonly reason: FinishReason;
      /** The model that answered, when the provider says (e.g. `gpt-4o-mini-2024-07-18`). */
      readonly model?: string;
    };

/**
 * A model: one call per subscription, cold; unsubscribing aborts the request. A client may say
 * which provider it talks to in `provider` and its default model in `model` (telemetry reports
 * them; `openAIChat` sets both).
 *
 * @example
 * const model: ModelClient = () => of<ModelUpdate[]>({ type: 'text-delta', text: 'Hello' }, { type: 'finish', reason: 'stop' });
 */
export interface ModelClient {
  (request: ModelRequest): Observable<ModelUpdate>;
  /** The provider, as the GenAI conventions name it (`openai`, `anthropic`, `aws.bedrock`…). */
  readonly provider?: string;
  /** The model it calls when a request's `settings.model` does not say (e.g. `gpt-4o-mini`). */
  readonly model?: string;
}

/** Token counts. */
export interface Usage {
  readonly inputTokens: number;
  readonly outputTokens: number;
}
