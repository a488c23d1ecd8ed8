// Turning answer text into DOM: sanitized Markdown with highlighted, copyable code once an
// answer is final, and a frame-rate limit for the plain text painted while it streams.
import DOMPurify from "./vendor/purify.js";
import hljs from "./vendor/highlight/core.js";
import bash from "./vendor/highlight/languages/bash.js";
import c from "./vendor/highlight/languages/c.js";
import cpp from "./vendor/highlight/languages/cpp.js";
import css from "./vendor/highlight/languages/css.js";
import diff from "./vendor/highlight/languages/diff.js";
import go from "./vendor/highlight/languages/go.js";
import java from "./vendor/highlight/languages/java.js";
import javascript from "./vendor/highlight/languages/javascript.js";
import json from "./vendor/highlight/languages/json.js";
import markdown from "./vendor/highlight/languages/markdown.js";
import plaintext from "./vendor/highlight/languages/plaintext.js";
import python from "./vendor/highlight/languages/python.js";
import rust from "./vendor/highlight/languages/rust.js";
import shell from "./vendor/highlight/languages/shell.js";
import sql from "./vendor/highlight/languages/sql.js";
import typescript from "./vendor/highlight/languages/typescript.js";
import xml from "./vendor/highlight/languages/xml.js";
import yaml from "./vendor/highlight/languages/yaml.js";
import { Marked } from "./vendor/marked.js";

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, markdown, plaintext, python, rust, shell, sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);

const escapeHtml = (text) =>
  String(text).replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);

const textWithLineBreaks = (text) =>
  text.replace(/\n+$/, "").split("\n")
    .map((line) => escapeHtml(line).replace(/^ +/, (spaces) => "&nbsp;".repeat(spaces.length)))
    .join("<br>");

const markdownParser = new Marked({
  gfm: true,
  renderer: {
    // A model's answer is text: HTML in it is shown, not obeyed. A block keeps its lines and
    // their indentation, as the model wrote them, in a paragraph of its own.
    html: ({ text, block }) => (block ? `<p>${textWithLineBreaks(text)}</p>` : escapeHtml(text)),
    // Remote images would load (and report to their host) the moment an answer renders.
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
  },
});

const SAFE_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);
const PURIFY_CONFIG = {
  ALLOWED_TAGS: [
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
    "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead",
    "tr", "ul",
  ],
  ALLOWED_ATTR: ["href", "title", "class", "align", "start"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

// DOMPurify needs a DOM; under node (unit tests) it is inert and these hooks are not needed.
if (DOMPurify.isSupported) {
  DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
    // Only Marked's language-* classes: nothing else may borrow our UI's classes.
    if (data.attrName === "class" && !/^language-[\w+#.-]+$/.test(data.attrValue)) data.keepAttr = false;
  });
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName !== "A") return;
    const href = node.getAttribute("href");
    if (href !== null) {
      let url = null;
      try {
        url = new URL(href, document.baseURI);
      } catch {
        // Unparseable: dropped below.
      }
      if (!url || !SAFE_PROTOCOLS.has(url.protocol)) node.removeAttribute("href");
    }
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  });
}

/** Markdown to a sanitized DocumentFragment, code highlighted, with copy buttons. */
export function renderMarkdown(text) {
  const fragment = DOMPurify.sanitize(markdownParser.parse(text, { async: false }), PURIFY_CONFIG);
  // A link whose address was unsafe (javascript:, data:...) lost it above: its words stay,
  // as plain text rather than a link that looks live and does nothing.
  for (const deadLink of fragment.querySelectorAll("a:not([href])")) deadLink.replaceWith(...deadLink.childNodes);
  for (const code of fragment.querySelectorAll("pre > code")) decorateCodeBlock(code);
  return fragment;
}

function decorateCodeBlock(code) {
  const pre = code.parentElement;
  const language = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className)?.[1] ?? "";
  if (language && hljs.getLanguage(language)) hljs.highlightElement(code);

  const block = document.createElement("div");
  block.className = "code-block";
  const bar = document.createElement("div");
  bar.className = "code-toolbar";
  const label = document.createElement("span");
  label.className = "code-language";
  label.textContent = language;
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy-code";
  button.textContent = "Copy code";
  button.addEventListener("click", () => copyWithFeedback(button, code.textContent));
  bar.append(label, button);
  pre.replaceWith(block);
  block.append(bar, pre);
}

/** Copies text; navigator.clipboard exists only on secure origins, so plain http falls back. */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Permission refused: try the old way.
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  const focused = document.activeElement;
  document.body.append(area);
  area.select();
  let copied = false;
  try {
    copied = document.execCommand("copy");
  } catch {
    copied = false;
  }
  area.remove();
  focused?.focus?.();
  return copied;
}

/** Copies and says so on the button itself, which screen readers announce as its new name. */
export async function copyWithFeedback(button, text) {
  if (!button.dataset.label) {
    button.dataset.label = button.textContent;
    button.dataset.ariaLabel = button.getAttribute("aria-label") || "";
  }
  const copied = await copyText(text);
  const result = copied ? "Copied" : "Copy failed";
  button.textContent = result;
  if (button.dataset.ariaLabel) button.setAttribute("aria-label", result);
  clearTimeout(Number(button.dataset.timer));
  button.dataset.timer = String(setTimeout(() => {
    button.textContent = button.dataset.label;
    if (button.dataset.ariaLabel) button.setAttribute("aria-label", button.dataset.ariaLabel);
  }, 2000));
}

/**
 * Calls `paint` at most once per animation frame after `schedule()`, and not at all while the
 * page is hidden: the text keeps growing, and one paint catches up when the page shows again.
 * `env` supplies document and requestAnimationFrame (tests pass fakes).
 */
export function createFramePainter(paint, env = globalThis) {
  const doc = env.document;
  let frame = null;
  let dirty = false;
  let cancelled = false;
  const hidden = () => Boolean(doc?.hidden);

  function request() {
    if (frame === null && !cancelled) frame = env.requestAnimationFrame(run);
  }
  function run() {
    frame = null;
    if (!dirty || cancelled || hidden()) return;
    dirty = false;
    paint();
  }
  function onVisibility() {
    if (!hidden() && dirty) request();
  }
  doc?.addEventListener?.("visibilitychange", onVisibility);

  return {
    schedule() {
      dirty = true;
      if (!hidden()) request();
    },
    cancel() {
      cancelled = true;
      dirty = false;
      if (frame !== null) env.cancelAnimationFrame(frame);
      frame = null;
      doc?.removeEventListener?.("visibilitychange", onVisibility);
    },
  };
}
