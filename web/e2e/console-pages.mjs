// What the studio console's browser checks (console.mjs, console-studio.mjs)
// read of its pages (/console): an element's text, a section opened from the
// menu, a table's row, whether the page scrolls sideways.

/** The helpers, polling with the script's `until` (harness.mjs). */
export function consolePages(until) {
  /** The text of the first element matching `sel` ("" when there is none). */
  const text = (page, sel) => page.evaluate((s) => document.querySelector(s)?.textContent ?? "", sel);

  /** Opens section `name` by its menu link `title`; waits for the URL and the heading. */
  async function section(page, name, title) {
    await page.getByRole("link", { name: title, exact: true }).click();
    await until(page, 5000, `section ${name} did not open`, async () =>
      (await page.evaluate(() => location.hash)) === `#${name}` && (await text(page, "#view-title")) === title);
  }

  /** The row of a table in `box` with a cell (or a shortened id's full text) equal to `needle`, as cell texts. */
  function row(page, box, needle) {
    return page.evaluate(([b, n]) => {
      for (const tr of document.querySelectorAll(`${b} tbody tr`)) {
        const cells = [...tr.cells].map((c) => c.textContent);
        if (cells.includes(n) || [...tr.querySelectorAll("[title]")].some((e) => e.title === n)) return cells;
      }
      return null;
    }, [box, needle]);
  }

  /** Whether the page scrolls sideways (it must not, at any width). */
  const sideways = (page) => page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);

  return { text, section, row, sideways };
}
