import { AbstractChat, type ChatState, type UIMessage } from 'ai';

/** The AI SDK's chat engine (what `useChat` runs) with its state in plain fields. */
export class PlainChat extends AbstractChat<UIMessage> {
  constructor(options: ConstructorParameters<typeof AbstractChat<UIMessage>>[0] extends infer O ? Omit<O, 'state'> : never) {
    const state: ChatState<UIMessage> = {
      status: 'ready',
      error: undefined,
      messages: [],
      pushMessage: (message) => void state.messages.push(message),
      popMessage: () => void state.messages.pop(),
      replaceMessage: (index, message) => void (state.messages[index] = message),
      snapshot: (thing) => structuredClone(thing),
    };
    super({ ...options, state });
  }
}

/** Resolves when the chat is back to `ready` (or failed). */
export async function settled(chat: PlainChat): Promise<void> {
  for (let i = 0; i < 500 && (chat.status === 'submitted' || chat.status === 'streaming'); i++) await new Promise((r) => setTimeout(r, 10));
}
