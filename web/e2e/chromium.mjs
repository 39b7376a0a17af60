// Launches Debian's Chromium headless for the browser tests (play.mjs,
// render.mjs): a fresh profile, and the flags that keep it off the network
// this machine does not have (background networking, updates, sync).
import { chromium } from "playwright-core";

export function launchChromium(userDataDir, options = {}) {
  return chromium.launchPersistentContext(userDataDir, {
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
    ...options,
  });
}

/**
 * Launches the same Chromium as a browser of several contexts (separate
 * cookies, storage and connection pools: one per simulated player, so many
 * players' streams do not share HTTP/1.1's six connections per host).
 */
export function launchBrowser(options = {}) {
  return chromium.launch({
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
    ...options,
  });
}
