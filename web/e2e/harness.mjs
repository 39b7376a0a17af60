// The harness every browser script here runs in: the usage line, the overall
// deadline, the steps done so far, the page errors seen, polling with a report
// of what the page shows, the browsers to close and profiles to remove, the
// lines a Go test writes to stdin (readLine), and how a run ends: one line of JSON on stdout and exit 0, or the failure on stderr
// and exit 1.
//
//   const h = harness({ name: "account e2e", usage: "node e2e/account.mjs BASE_URL ARTIFACTS_DIR",
//     argsOk: Boolean(base && artifacts), totalMs: 90_000, steps: true });
//   const { check, until, step } = h;
//   …
//   await h.run(async () => {
//     const page = await firstPage(await h.persistentContext("ludus-account-", { viewport }));
//     h.watch(page);
//     …
//     return { account };        // printed as {"ok":true,"account":…,"ms":…}
//   });
//
// A failure (a thrown error, or the deadline) prints
//   NAME failed after 12.3 s, after steps [a, b]: MESSAGE (page errors: …)
// (the steps only with `steps: true`, the time unless `elapsed: false`, the page
// errors when there were any: the first five), closes what was launched and
// exits 1.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { launchBrowser, launchChromium } from "./chromium.mjs";

/** Console errors of requests a flow makes fail on purpose (bad uploads, aborted streams, 404s). */
export const FAILED_REQUESTS = /Failed to load resource|net::ERR_FAILED/;

/** Throws `what` unless `cond`. */
export function check(cond, what) {
  if (!cond) throw new Error(what);
}

let stdinLines = null;

/** The next line the Go test wrote to stdin, which must start with prefix: the rest of it, trimmed. */
export async function readLine(prefix) {
  stdinLines ??= createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const { value, done } = await stdinLines.next();
  check(!done && value.startsWith(prefix), `expected "${prefix}…" from the test, got ${JSON.stringify(value)}`);
  return value.slice(prefix.length).trim();
}

/** A launched context's first page (a persistent context opens with one). */
export async function firstPage(context) {
  return context.pages()[0] ?? (await context.newPage());
}

/** `until`'s default report: the first `chars` characters of the page's text. */
export function pageText(chars = 600) {
  return async (page) => {
    const body = await page.evaluate((n) => document.body.innerText.slice(0, n), chars).catch(() => "");
    return `; page says: ${JSON.stringify(body)}`;
  };
}

/**
 * Starts a script's run: checks its arguments (argsOk false: prints "usage:
 * USAGE" and exits 2) and arms the deadline of totalMs. Options:
 *
 *   name           the failure line's subject ("account e2e", "site e2e (meta)")
 *   steps          the failure line lists the steps done (step(name))
 *   elapsed        the failure line says how long the run took (default true)
 *   firstLine      a thrown error is reported by its message's first line only
 *                  (default true: not Playwright's call log)
 *   ms             the JSON line ends with the run's milliseconds (default true)
 *   ignoreConsole  console errors matching this are not page errors
 *   consoleErrors  console errors are page errors at all (default true)
 *   poll           until's interval, ms (default 100)
 *   describe       async (page) => what until's timeout appends to its message
 *                  (default pageText(600))
 *   format         ({ message, timedOut, pageErrors, steps, seconds }) => the
 *                  failure line, for a shape of its own
 *   print          (result) => prints the result instead of the JSON line
 */
export function harness({
  name,
  usage,
  argsOk = true,
  totalMs,
  steps: withSteps = false,
  elapsed = true,
  firstLine = true,
  ms = true,
  ignoreConsole = null,
  consoleErrors = true,
  poll = 100,
  describe = pageText(600),
  format = null,
  print = null,
}) {
  if (!argsOk) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }

  const started = Date.now();
  const pageErrors = [];
  const steps = [];
  const launched = [];
  const dirs = [];
  let finished = false;

  async function cleanup() {
    await Promise.all(launched.map(async (b) => {
      try {
        await Promise.race([b.close(), new Promise((r) => setTimeout(r, 5000))]);
      } catch {
        // the browser may already be gone
      }
    }));
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }

  async function fail(message, timedOut = false) {
    if (finished) return;
    finished = true;
    const seconds = (Date.now() - started) / 1000;
    if (format) {
      console.error(format({ message, timedOut, pageErrors, steps, seconds }));
    } else {
      const after = elapsed ? ` after ${seconds.toFixed(1)} s` : "";
      const done = withSteps ? `, after steps [${steps.join(", ")}]` : "";
      const errors = pageErrors.length ? ` (page errors: ${pageErrors.slice(0, 5).join(" | ")})` : "";
      console.error(`${name} failed${after}${done}: ${message}${errors}`);
    }
    await cleanup();
    process.exit(1);
  }

  const deadline = setTimeout(() => void fail(`timed out after ${totalMs / 1000} s`, true), totalMs);

  return {
    started,
    pageErrors,
    steps,
    check,

    /** Records a step done, for the failure line. */
    step(what) {
      steps.push(what);
    },

    /** Polls fn() until it returns a truthy value (returned); throws `what` and what the page shows if not within ms. */
    async until(page, ms, what, fn) {
      const end = Date.now() + ms;
      for (;;) {
        const v = await fn();
        if (v) return v;
        if (Date.now() > end) throw new Error(`${what}${await describe(page)}`);
        await page.waitForTimeout(poll);
      }
    },

    /** Collects the page's errors (and console errors), prefixed with `label` when given. */
    watch(page, label = "") {
      page.on("pageerror", (err) => pageErrors.push(label ? `${label}: ${err.message}` : err.message));
      if (!consoleErrors) return;
      page.on("console", (msg) => {
        if (msg.type() === "error" && !ignoreConsole?.test(msg.text())) {
          pageErrors.push(label ? `${label} console: ${msg.text()}` : `console: ${msg.text()}`);
        }
      });
    },

    /** Chromium with a fresh profile (a temporary directory named prefix…), closed and removed at the end. */
    async persistentContext(prefix, options = {}) {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(dir);
      const context = await launchChromium(dir, options);
      launched.push(context);
      return context;
    },

    /** Chromium as a browser of several contexts, closed at the end. */
    async browser(options = {}) {
      const browser = await launchBrowser(options);
      launched.push(browser);
      return browser;
    },

    /** Runs the flow: its result is printed (see print, ms) and the script exits 0; a throw fails the run. */
    async run(flow) {
      try {
        const result = await flow();
        if (finished) return; // the deadline struck first
        clearTimeout(deadline);
        finished = true;
        if (print) print(result);
        else console.log(JSON.stringify(ms ? { ok: true, ...result, ms: Date.now() - started } : { ok: true, ...result }));
        await cleanup();
        process.exit(0);
      } catch (err) {
        await fail(err instanceof Error ? (firstLine ? err.message.split("\n")[0] : err.message) : String(err));
      }
    },
  };
}
