// An answer's Markdown to an HTML string, for render.js to sanitize. No DOM here: a worker
// (markdown_worker.js) parses long answers with it, off the page's thread.
import { Marked } from "./vendor/marked.js";

const escapeHtml = (text) =>
  String(text).replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);

const textWithLineBreaks = (text) =>
  text.replace(/\n+$/, "").split("\n")
    .map((line) => escapeHtml(line).replace(/^ +/, (spaces) => "&nbsp;".repeat(spaces.length)))
    .join("<br>");

const markdownParser = new Marked({
  gfm: true,
  // A line the model ended with one newline stays a line, as it was while it streamed: a poem,
  // an address or a list of steps without bullets is not folded into one paragraph at its end.
  breaks: true,
  renderer: {
    // A model's answer is text: HTML in it is shown, not obeyed. A block keeps its lines and
    // their indentation, as the model wrote them, in a paragraph of its own.
    html: ({ text, block }) => (block ? `<p>${textWithLineBreaks(text)}</p>` : escapeHtml(text)),
    // So is a character reference ("&amp;", "&#169;"), which would otherwise turn into another
    // character the moment the answer ends. A text token's raw is what the model wrote; any
    // other (a list item's text, a backslash escape) is drawn as Marked draws it (false).
    text: (token) => (token.type === "text" && !token.tokens ? escapeHtml(token.raw) : false),
    // Remote images would load (and report to their host) the moment an answer renders.
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
    // An image inside a link ([![alt](src)](href), a badge) is its alt text in that link: as a
    // link of its own (above) it split the outer one, left empty and unseen, and its words went
    // to the image's address instead of the link's. `false`: Marked's own link does the rest.
    link(token) {
      token.tokens = token.tokens.map((inner) =>
        (inner.type === "image" ? { type: "text", raw: inner.text || inner.href, text: inner.text || inner.href } : inner));
      return false;
    },
  },
});

/** HTML, unsanitized; throws where Marked does (nesting deeper than its recursion goes). */
export const markdownToHtml = (text) => markdownParser.parse(text, { async: false });
