// Sharing a match: copy buttons and QR codes for the invite and spectator links.

import qrcode from "qrcode-generator";

/**
 * Share handles the `data-copy="ID"` and `data-qr="ID"` buttons next to links (ID is
 * the link's element id): Copy puts the link's URL on the clipboard, QR shows the
 * URL as a QR code (the same button hides it again).
 */
export class Share {
  private showing = "";

  constructor(
    private readonly figure: HTMLElement,
    private readonly code: HTMLElement,
    private readonly caption: HTMLElement,
  ) {}

  bind(root: HTMLElement): void {
    root.addEventListener("click", (e) => {
      const b = (e.target as HTMLElement | null)?.closest("button");
      if (!b) return;
      const copy = b.dataset["copy"];
      const qr = b.dataset["qr"];
      if (copy) void this.copy(b, linkOf(copy));
      else if (qr) this.toggle(b, qr);
    });
  }

  hide(): void {
    this.showing = "";
    this.figure.hidden = true;
    this.code.replaceChildren();
    document.querySelectorAll("button[data-qr]").forEach((b) => b.setAttribute("aria-expanded", "false"));
  }

  private toggle(button: HTMLButtonElement, id: string): void {
    const was = this.showing;
    this.hide();
    if (was === id) return;
    const link = linkOf(id);
    if (!link) return;
    const q = qrcode(0, "M");
    q.addData(link.href);
    q.make();
    // Our own URL, drawn by the library as an SVG of rectangles.
    this.code.innerHTML = q.createSvgTag({ cellSize: 4, margin: 4, scalable: true });
    const svg = this.code.querySelector("svg");
    svg?.setAttribute("role", "img");
    svg?.setAttribute("aria-label", `QR code: ${link.href}`);
    this.caption.textContent = `${link.textContent ?? "Link"}: ${link.href}`;
    this.figure.hidden = false;
    this.figure.dataset["for"] = id;
    this.showing = id;
    button.setAttribute("aria-expanded", "true");
  }

  private async copy(button: HTMLButtonElement, link: HTMLAnchorElement | null): Promise<void> {
    if (!link) return;
    let ok = false;
    try {
      await navigator.clipboard.writeText(link.href);
      ok = true;
    } catch {
      ok = legacyCopy(link.href);
    }
    const label = button.textContent;
    button.textContent = ok ? "Copied" : "Copy failed";
    button.dataset["copied"] = ok ? link.href : "";
    setTimeout(() => (button.textContent = label), 1500);
  }
}

function linkOf(id: string): HTMLAnchorElement | null {
  const el = document.getElementById(id);
  return el instanceof HTMLAnchorElement && el.href ? el : null;
}

/** Copy for pages without the async clipboard (plain http on another host). */
function legacyCopy(text: string): boolean {
  const t = document.createElement("textarea");
  t.value = text;
  t.setAttribute("readonly", "");
  t.style.position = "fixed";
  t.style.opacity = "0";
  document.body.append(t);
  t.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  t.remove();
  return ok;
}
