// A small inline SVG bar chart of hourly usage for the console's "Quotas &
// usage" section: two series side by side per hour, each scaled to its own
// largest value (they have different units), with a legend, hour labels and a
// tooltip (<title>) per bar. No library: a few rectangles.

const SVG = "http://www.w3.org/2000/svg";

export interface Series {
  name: string;
  /** CSS class of the bars (their colour). */
  cls: string;
  /** One value per hour, oldest first. */
  values: number[];
  /** How a value reads in a tooltip ("12.5 CPU-s"). */
  format: (v: number) => string;
}

function el<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, ...children: (Node | string)[]): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  e.append(...children);
  return e;
}

/**
 * Bars for `labels.length` hours. The SVG scales to its box's width (viewBox);
 * its accessible name sums each series up.
 */
export function barChart(title: string, labels: string[], series: Series[]): SVGSVGElement {
  const W = 720;
  const H = 180;
  const left = 8;
  const top = 26;
  const bottom = 22;
  const n = Math.max(1, labels.length);
  const slot = (W - left * 2) / n;
  const bar = Math.max(1, (slot - 4) / Math.max(1, series.length));
  const plotH = H - top - bottom;
  const summary = series.map((s) => `${s.name}: ${s.format(s.values.reduce((a, b) => a + b, 0))} in total, at most ${s.format(Math.max(0, ...s.values))} in an hour`).join("; ");
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `${title}. ${summary}.` }, el("title", {}, title));
  // Legend.
  let x = left;
  for (const s of series) {
    const max = Math.max(0, ...s.values);
    svg.append(el("rect", { x, y: 6, width: 10, height: 10, class: s.cls }));
    const label = `${s.name} (highest ${s.format(max)})`;
    svg.append(el("text", { x: x + 14, y: 15, class: "legend" }, label));
    x += 24 + label.length * 6.2;
  }
  // Baseline.
  svg.append(el("line", { x1: left, x2: W - left, y1: top + plotH, y2: top + plotH, class: "axis" }));
  series.forEach((s, si) => {
    const max = Math.max(...s.values, 0);
    s.values.forEach((v, i) => {
      const h = max > 0 ? Math.max(v > 0 ? 1 : 0, (v / max) * plotH) : 0;
      const r = el("rect", { x: left + i * slot + 2 + si * bar, y: top + plotH - h, width: bar, height: h, class: s.cls });
      r.append(el("title", {}, `${labels[i] ?? ""}: ${s.format(v)}`));
      svg.append(r);
    });
  });
  // Hour labels: every fourth hour, and the last.
  labels.forEach((l, i) => {
    if (i % 4 !== 0 && i !== labels.length - 1) return;
    svg.append(el("text", { x: left + i * slot + slot / 2, y: H - 6, class: "tick", "text-anchor": "middle" }, l));
  });
  return svg;
}
