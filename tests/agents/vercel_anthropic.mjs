// The Vercel AI SDK's Anthropic provider running a tool loop through the gateway's Messages
// endpoint: generateText, then streamText, each with one tool and leave for three steps.
//
// Usage: node vercel_anthropic.mjs <node_modules folder> <gateway /v1 URL> <key> <model> <number>
// The tool `lookup_marker` answers `shunter-<number + 1>-marker`, a string the prompt does not
// hold, so an answer quoting it shows the tool ran and the gateway carried both turns. Prints
// one JSON object: for each call its final text, its steps and the `x-shunter-dropped` headers
// of the answers it got.
import { createRequire } from "node:module";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, baseURL, apiKey, model, number] = process.argv.slice(2);
// the packages live in the agents' npm folder, not beside this file
const where = createRequire(resolve(modules, "resolve.cjs")).resolve;
const load = (name) => import(pathToFileURL(where(name)).href);
const { generateText, jsonSchema, stepCountIs, streamText, tool } = await load("ai");
const { createAnthropic } = await load("@ai-sdk/anthropic");

function recording(dropped) {
  return async (input, init) => {
    const answer = await fetch(input, init);
    dropped.push(answer.headers.get("x-shunter-dropped") ?? "");
    return answer;
  };
}

function lookup(providerOptions) {
  return tool({
    description: "Looks up the marker for a number.",
    inputSchema: jsonSchema({
      type: "object",
      properties: { number: { type: "integer" } },
      required: ["number"],
    }),
    execute: async ({ number }) => `shunter-${number + 1}-marker`,
    ...(providerOptions ? { providerOptions } : {}),
  });
}

const prompt = `Look up the marker for ${number}, then tell me what it is.`;
const maxOutputTokens = 512; // a model name the provider does not know gets 128000 otherwise

async function generated() {
  const dropped = [];
  const anthropic = createAnthropic({ baseURL, apiKey, fetch: recording(dropped) });
  // a plain generateText streams nothing, so the provider sends eager_input_streaming only
  // where a tool asks for it
  const eager = { anthropic: { eagerInputStreaming: true } };
  const result = await generateText({
    model: anthropic(model),
    tools: { lookup_marker: lookup(eager) },
    stopWhen: stepCountIs(3),
    maxOutputTokens,
    prompt,
  });
  return { text: result.text, steps: result.steps.length, dropped };
}

async function streamed() {
  const dropped = [];
  const anthropic = createAnthropic({ baseURL, apiKey, fetch: recording(dropped) });
  // streaming, the provider sets eager_input_streaming: true on every tool by default
  const result = streamText({
    model: anthropic(model),
    tools: { lookup_marker: lookup() },
    stopWhen: stepCountIs(3),
    maxOutputTokens,
    prompt,
    onError: ({ error }) => {
      throw error;
    },
  });
  return { text: await result.text, steps: (await result.steps).length, dropped };
}

console.log(JSON.stringify({ generate: await generated(), stream: await streamed() }));
