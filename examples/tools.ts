import { z } from 'zod';
import { defineTool } from '../src/index';

/** The demo's tools: two that read, one that books and so needs a person's approval. */
export const getWeather = defineTool({
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: z.object({ city: z.string().describe('City name, e.g. Paris') }),
  execute: ({ city }) => ({ city, condition: 'sunny', celsius: 21 }),
});

export const searchPlaces = defineTool({
  name: 'search_places',
  description: 'Finds places of a kind in a city',
  parameters: z.object({ city: z.string(), kind: z.enum(['cafe', 'museum', 'park']) }),
  execute: ({ city, kind }) => {
    const places: Record<string, string[]> = {
      cafe: ['Café de Flore', 'Les Deux Magots'],
      museum: ['Musée d’Orsay', 'Musée Rodin'],
      park: ['Jardin du Luxembourg'],
    };
    return { city, kind, results: places[kind] };
  },
});

/**
 * Makes the booking tool. It takes `delayMs` (the demo's durable mode makes it slow enough to be
 * interrupted) and calls `onStart` as it begins. Not idempotent: a booking caught mid-flight by a
 * crash is not run again on resume.
 */
export function makeBookTable(delayMs = 150, onStart?: () => void) {
  return defineTool({
    name: 'book_table',
    description: 'Books a table at a place (asks the user first)',
    parameters: z.object({ place: z.string(), time: z.string().regex(/^\d{2}:\d{2}$/), people: z.number().int().min(1) }),
    needsApproval: true,
    execute: async ({ place, time, people }, ctx) => {
      onStart?.();
      await new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, delayMs);
        ctx.signal.addEventListener('abort', () => (clearTimeout(timer), reject(ctx.signal.reason)), { once: true });
      });
      return { confirmation: `BK-${place.length}${time.replace(':', '')}`, place, time, people };
    },
  });
}

export const bookTable = makeBookTable();

/** The demo's structured output (`npm start -- --json`): the plan as JSON, checked by zod. */
export const AfternoonPlan = z
  .object({
    weather: z.object({ city: z.string(), condition: z.string(), celsius: z.number() }),
    place: z.string(),
    booking: z.object({
      status: z.enum(['booked', 'not-approved', 'unknown']),
      time: z.string().nullable(),
      people: z.number().int().nullable(),
    }),
    summary: z.string(),
  })
  .meta({ title: 'afternoon_plan', description: 'The afternoon plan: weather, place, booking and a one-line summary' });
