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
import { markdownToHtml } from "./markdown.js";

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, markdown, plaintext, python, rust, shell, sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);

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

// Marked is quadratic on some runs (intraword `_a_a_a…`, a long word before an `@`): on a busy
// two-core machine 10 KB of them took 0.4 s, 20 KB up to 4 s, 200 KB minutes, on the page's
// thread. A longer text is parsed in a worker instead, shown as plain text meanwhile, and
// stays so if the worker takes longer than the budget.
const LONG_TEXT_CHARS = 10_000;
const PARSE_BUDGET_MS = 5_000;
const latestText = new WeakMap(); // element -> the text last shown in it
// One worker, one text at a time, so that each has the whole budget however many long answers
// a conversation opens with; a text rewritten before its turn comes is skipped.
const waiting = [];
let parsing = null; // { el, text, giveUp }
let worker = null;

/**
 * Shows `text` as Markdown in `el`: sanitized, code highlighted, with copy buttons; at once, or
 * for a long text once the worker has parsed it. A text the parser cannot take stays plain text.
 */
export function showMarkdown(el, text) {
  latestText.set(el, text);
  if (text.length <= LONG_TEXT_CHARS) {
    el.replaceChildren(renderMarkdown(text));
    return;
  }
  el.replaceChildren(plainText(text));
  waiting.push({ el, text });
  parseNext();
}

// Not rewritten since (a regenerate, a stream begun, another text). A message is made before
// it is put on the page, so whether it is there yet says nothing.
const isShown = ({ el, text }) => latestText.get(el) === text && el.classList.contains("markdown");

function parseNext() {
  if (parsing) return;
  const next = waiting.shift();
  if (!next) return;
  if (!isShown(next)) {
    parseNext();
    return;
  }
  worker ??= startWorker();
  const giveUp = setTimeout(() => {
    worker.terminate(); // the plain text stays
    worker = null;
    parsing = null;
    parseNext();
  }, PARSE_BUDGET_MS);
  parsing = { ...next, giveUp };
  worker.postMessage(next.text);
}

function startWorker() {
  const started = new Worker(new URL("./markdown_worker.js", import.meta.url), { type: "module" });
  started.addEventListener("message", ({ data: { html } }) => {
    clearTimeout(parsing.giveUp);
    if (html !== null && isShown(parsing)) parsing.el.replaceChildren(safeFragment(html));
    parsing = null;
    parseNext();
  });
  return started;
}

/**
 * Markdown to a sanitized DocumentFragment, code highlighted, with copy buttons; a text the
 * parser cannot take is shown as the text it is.
 */
function renderMarkdown(text) {
  let html;
  try {
    html = markdownToHtml(text);
  } catch {
    // Marked recurses once per level of nesting: a few kilobytes of `>`, `- ` or `*` (which a
    // model can be talked into writing) overflow the stack, and an answer that throws here
    // would leave its whole conversation unshown, every time it is opened.
    return plainText(text);
  }
  return safeFragment(html);
}

function plainText(text) {
  const paragraph = document.createElement("p");
  text.replace(/\n+$/, "").split("\n").forEach((line, i) => {
    if (i > 0) paragraph.append(document.createElement("br"));
    paragraph.append(line);
  });
  const fragment = document.createDocumentFragment();
  fragment.append(paragraph);
  return fragment;
}

function safeFragment(html) {
  const fragment = DOMPurify.sanitize(html, PURIFY_CONFIG);
  // A link whose address was unsafe (javascript:, data:...) lost it above: its words stay,
  // as plain text rather than a link that looks live and does nothing.
  for (const deadLink of fragment.querySelectorAll("a:not([href])")) deadLink.replaceWith(...deadLink.childNodes);
  for (const link of fragment.querySelectorAll("a[href]")) sayWhereItGoes(link);
  for (const code of fragment.querySelectorAll("pre > code")) decorateCodeBlock(code);
  return fragment;
}

// Characters that change how code reads without being seen (Trojan Source, CVE-2021-42574): a
// direction override makes a line show otherwise than it runs, a zero-width one hides in a name.
const HIDDEN_CHARACTERS = {
  "\u200b": "ZERO WIDTH SPACE", "\u200e": "LEFT-TO-RIGHT MARK", "\u200f": "RIGHT-TO-LEFT MARK",
  "\u202a": "LEFT-TO-RIGHT EMBEDDING", "\u202b": "RIGHT-TO-LEFT EMBEDDING",
  "\u202c": "POP DIRECTIONAL FORMATTING", "\u202d": "LEFT-TO-RIGHT OVERRIDE",
  "\u202e": "RIGHT-TO-LEFT OVERRIDE", "\u2060": "WORD JOINER", "\u2066": "LEFT-TO-RIGHT ISOLATE",
  "\u2067": "RIGHT-TO-LEFT ISOLATE", "\u2068": "FIRST STRONG ISOLATE",
  "\u2069": "POP DIRECTIONAL ISOLATE", "\ufeff": "ZERO WIDTH NO-BREAK SPACE",
};
const HIDDEN = new RegExp(`[${Object.keys(HIDDEN_CHARACTERS).join("")}]`, "g");

/**
 * Shows each hidden character of `code` where it is, as its code point, and keeps it there (Copy
 * code copies the code as it is): each sits in an isolate of its own, so that it can no longer
 * reorder the text around it. The number of them.
 */
function markHiddenCharacters(code) {
  const texts = [];
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) if (walker.currentNode.data.match(HIDDEN)) texts.push(walker.currentNode);
  let count = 0;
  for (const node of texts) {
    const parts = [];
    let last = 0;
    for (const match of node.data.matchAll(HIDDEN)) {
      const char = match[0];
      const point = `U+${char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
      const mark = document.createElement("span");
      mark.className = "hidden-char";
      mark.dataset.point = point;
      mark.title = `${point} ${HIDDEN_CHARACTERS[char]}`;
      mark.textContent = char;
      parts.push(node.data.slice(last, match.index), mark);
      last = match.index + char.length;
      count += 1;
    }
    parts.push(node.data.slice(last));
    node.replaceWith(...parts);
  }
  return count;
}

// Words that read as a web address: an optional scheme, a host with a dot, a port, a path.
const ADDRESS_WORDS = /^(?:[a-z][a-z\d+.-]*:\/\/)?([^\s/?#:@]+\.[^\s/?#:@]+)(?::\d+)?(?:[/?#]\S*)?$/i;

/** The host `words` name, as a URL would spell it (IDNs in punycode); null if they name none. */
function hostNamed(words) {
  const host = ADDRESS_WORDS.exec(words.trim())?.[1];
  if (!host) return null;
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return null;
  }
}

const sameSite = (a, b) => a.replace(/^www\./, "") === b.replace(/^www\./, "");

/**
 * A link whose words are another address than its own ("https://mybank.com" to evil.example)
 * says where it really goes, in its words, so that sighted and screen reader users both hear it.
 */
function sayWhereItGoes(link) {
  const named = hostNamed(link.textContent);
  const target = new URL(link.href).hostname;
  if (named === null || !target || sameSite(named, target)) return;
  link.title = link.href;
  const host = document.createElement("span");
  host.className = "link-host";
  host.textContent = ` (${target})`;
  link.append(host);
}

function decorateCodeBlock(code) {
  const pre = code.parentElement;
  const language = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className)?.[1] ?? "";
  if (language && hljs.getLanguage(language)) hljs.highlightElement(code);
  const hidden = markHiddenCharacters(code);

  const block = document.createElement("div");
  block.className = "code-block";
  const bar = document.createElement("div");
  bar.className = "code-toolbar";
  const label = document.createElement("span");
  label.className = "code-language";
  label.textContent = language;
  if (hidden) {
    const marked = `${hidden} hidden character${hidden === 1 ? "" : "s"} marked`;
    label.textContent = language ? `${language} · ${marked}` : marked;
  }
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
