// Parses one long answer's Markdown off the page's thread (render.js): what Marked takes
// minutes over then freezes nothing, and the page may give up on it.
import { markdownToHtml } from "./markdown.js";

self.addEventListener("message", ({ data: text }) => {
  try {
    self.postMessage({ html: markdownToHtml(text) });
  } catch {
    self.postMessage({ html: null });
  }
});
