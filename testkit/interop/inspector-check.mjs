// Drives mcp-front with the MCP Inspector CLI (pinned in package.json) and
// checks what a person would: the tools and their annotations, a created
// ticket, its replay, and find_request. Usage:
//   node inspector-check.mjs http <url>
//   node inspector-check.mjs stdio <mcp-front binary> <db path>
// Exits non-zero with a message on the first mismatch.
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const inspector = join(here, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js");
const [mode, target, db] = process.argv.slice(2);

function run(args) {
  // --tool-arg takes several values: the URL goes first, the stdio command
  // after "--".
  const argv = mode === "http"
    ? [inspector, "--cli", target, "--transport", "http", ...args]
    : [inspector, "--cli", "--transport", "stdio", ...args, "--", target, "-stdio", "-create-db", "-db", db, "-log-level", "debug"];
  let out;
  try {
    // The server's stderr (its logs) passes through; stdout is the answer.
    out = execFileSync(process.execPath, argv, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 60_000 });
  } catch (e) {
    fail(`inspector ${args.join(" ")} exited with ${e.status}: ${e.stdout ?? ""}`);
  }
  try {
    return JSON.parse(out);
  } catch {
    fail(`inspector ${args.join(" ")}: stdout is not JSON: ${out.slice(0, 500)}`);
  }
}

function fail(msg) {
  console.error(`inspector-check (${mode}): FAIL: ${msg}`);
  process.exit(1);
}

function expect(cond, msg) {
  if (!cond) fail(msg);
}

const list = run(["--method", "tools/list"]);
const tools = Object.fromEntries((list.tools ?? []).map((t) => [t.name, t]));
const create = tools["create_ticket"];
const find = tools["find_request"];
expect(create && find, `tools/list lacks create_ticket or find_request: ${Object.keys(tools).join(", ")}`);
const ca = create.annotations ?? {};
expect(ca.idempotentHint === true, `create_ticket idempotentHint = ${ca.idempotentHint}, want true`);
expect(ca.destructiveHint === false, `create_ticket destructiveHint = ${ca.destructiveHint}, want false (explicit)`);
expect(ca.readOnlyHint !== true, `create_ticket readOnlyHint = ${ca.readOnlyHint}`);
expect((find.annotations ?? {}).readOnlyHint === true, `find_request readOnlyHint = ${(find.annotations ?? {}).readOnlyHint}, want true`);
expect(create.inputSchema?.required?.includes("request_id"), "create_ticket does not require request_id");

const id = randomUUID();
const args = ["--method", "tools/call", "--tool-name", "create_ticket", "--tool-arg", `request_id=${id}`, "--tool-arg", "title=Inspector says hello"];
const first = run(args);
expect(!first.isError, `create_ticket failed: ${JSON.stringify(first)}`);
const r1 = first.structuredContent ?? {};
expect(r1.request_id === id && r1.ticket_id && r1.status === "queued" && r1.replayed === false,
  `create_ticket answered ${JSON.stringify(r1)}`);

const again = run(args).structuredContent ?? {};
expect(again.replayed === true && again.ticket_id === r1.ticket_id, `retry answered ${JSON.stringify(again)}, want the same ticket replayed`);

const found = run(["--method", "tools/call", "--tool-name", "find_request", "--tool-arg", `request_id=${id}`]);
const st = found.structuredContent ?? JSON.parse(found.content?.[0]?.text ?? "{}");
expect(st.ticket_id === r1.ticket_id && st.status && st.status !== "unknown", `find_request answered ${JSON.stringify(st)}`);

const unknown = run(["--method", "tools/call", "--tool-name", "find_request", "--tool-arg", `request_id=${randomUUID()}`]);
expect((unknown.structuredContent ?? {}).status === "unknown", `find_request of a new id answered ${JSON.stringify(unknown)}`);

console.log(`inspector-check (${mode}): ok: ${Object.keys(tools).length} tools with annotations; create_ticket ${r1.ticket_id} created, replayed; find_request ${st.status}`);
