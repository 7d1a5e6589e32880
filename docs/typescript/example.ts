/**
 * A bot backend in TypeScript talking to Cardloop with types generated from `/api/schema/`
 * (`npx openapi-typescript schema.yaml -o schema.d.ts`; `check.sh` does it and runs
 * `tsc --noEmit` on this file). It sends a final answer (a delivery), shows a progress card,
 * asks the user two questions and waits for the answer with the long-poll.
 *
 *     CARDLOOP_URL=http://127.0.0.1:8000 CARDLOOP_KEY=clk_… node --experimental-strip-types example.ts
 *
 * Every request and response body below is typed from the schema: a renamed field or a
 * changed enum in the API breaks the type-check, not the backend in production.
 */
import type { components, paths } from "./schema";

type Schemas = components["schemas"];

/** Node's `process`, declared here so the check needs no @types/node. */
declare const process: { env: Record<string, string | undefined>; exitCode?: number };

/** The JSON body of `M path` (`paths[P][M].requestBody`). */
type RequestBody<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody?: { content: { "application/json": infer B } };
}
  ? B
  : never;

/** The JSON answer of `M path` with status `S`. */
type ResponseBody<P extends keyof paths, M extends keyof paths[P], S extends number> = paths[P][M] extends {
  responses: infer R;
}
  ? S extends keyof R
    ? R[S] extends { content: { "application/json": infer B } }
      ? B
      : never
    : never
  : never;

const BASE = process.env.CARDLOOP_URL ?? "http://127.0.0.1:8000";
const KEY = process.env.CARDLOOP_KEY ?? "clk_…";

/** A Cardloop error answer: `{error, detail}` (detail names the field for a 400). */
export class CardloopError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(`Cardloop answered ${status}: ${JSON.stringify(body)}`);
  }
}

async function call<T>(method: "GET" | "POST" | "PUT", path: string, body?: unknown, ok = [200, 201]): Promise<T> {
  const answer = await fetch(`${BASE}${path}`, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data: unknown = await answer.json();
  if (!ok.includes(answer.status)) throw new CardloopError(answer.status, data);
  return data as T;
}

/** Send the final answer card of a turn (feedback buttons are appended by Cardloop). */
export function createDelivery(
  body: RequestBody<"/api/v1/deliveries", "post">,
): Promise<ResponseBody<"/api/v1/deliveries", "post", 201>> {
  return call("POST", "/api/v1/deliveries", body);
}

/** Show or update the session's progress card (the form of an ask goes on it). */
export function putProgress(
  sessionId: string,
  body: RequestBody<"/api/v1/sessions/{session_id}/progress", "put">,
): Promise<Schemas["ProgressSession"]> {
  return call("PUT", `/api/v1/sessions/${encodeURIComponent(sessionId)}/progress`, body);
}

/** Ask 1–4 questions; null when nobody can be asked (409 当前通道无法向用户提问). */
export async function askQuestions(
  sessionId: string,
  body: RequestBody<"/api/v1/sessions/{session_id}/asks", "post">,
): Promise<Schemas["AskCreated"] | null> {
  try {
    return await call("POST", `/api/v1/sessions/${encodeURIComponent(sessionId)}/asks`, body);
  } catch (error) {
    if (error instanceof CardloopError && error.status === 409) {
      const refused = error.body as Schemas["AskNoChannel"];
      console.log(refused.error); // 当前通道无法向用户提问: continue in text
      return null;
    }
    throw error;
  }
}

/** Long-poll until the ask is answered, timed out or cancelled. */
export async function waitForAnswer(requestId: string): Promise<Schemas["AskState"]> {
  for (;;) {
    const state: ResponseBody<"/api/v1/asks/{request_id}", "get", 200> = await call(
      "GET",
      `/api/v1/asks/${encodeURIComponent(requestId)}?wait=60`,
    );
    if (state.status !== "pending") return state;
  }
}

async function main(): Promise<void> {
  const sessionId = "sess_ts_example";
  const delivery = await createDelivery({
    chat_id: "oc_demo_team_chat",
    session_id: sessionId,
    turn_id: "t-1",
    requester_open_id: "ou_requester",
    response_kind: "final",
    card: { schema: "2.0", config: { update_multi: true }, body: { elements: [] } },
  });
  console.log("delivery", delivery.delivery_id, delivery.feedback_shown);

  await putProgress(sessionId, {
    status: "running",
    title: "Deploying",
    chat_id: "oc_demo_team_chat",
    requester_open_id: "ou_requester",
  });
  const asked = await askQuestions(sessionId, {
    questions: [
      {
        question: "Which database should the service use?",
        header: "Database",
        options: [{ label: "SQLite" }, { label: "PostgreSQL", description: "Production grade" }],
      },
      {
        question: "Which checks should run before the deploy?",
        options: [{ label: "Unit tests" }, { label: "Lint" }],
        multiSelect: true,
      },
    ],
  });
  if (asked === null) return;
  const state = await waitForAnswer(asked.requestId);
  for (const answer of state.answers) {
    const labels: string[] = answer.selectedLabels;
    console.log(answer.question, labels, answer.customInput, "via", state.answered_via);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
