// Launches Debian's Chromium headless for the browser tests (harness.mjs, on
// behalf of every script here): a fresh profile, and the flags that keep it off
// the network this machine does not have (background networking, updates, sync).
import { chromium } from "playwright-core";

/** How every browser here is started: $CHROMIUM (default /usr/bin/chromium), headless, offline. */
const LAUNCH = {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
};

export function launchChromium(userDataDir, options = {}) {
  return chromium.launchPersistentContext(userDataDir, { ...LAUNCH, ...options });
}

/**
 * Launches the same Chromium as a browser of several contexts (separate
 * cookies, storage and connection pools: one per simulated player, so many
 * players' streams do not share HTTP/1.1's six connections per host).
 */
export function launchBrowser(options = {}) {
  return chromium.launch({ ...LAUNCH, ...options });
}
