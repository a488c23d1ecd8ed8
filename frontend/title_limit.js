// A conversation title's limit in the rename box, counted as the server counts it: in code points
// (GET /api/auth/session's limits.max_title_chars). An input's maxLength counts UTF-16 units,
// which took a name of emoji at half the length the server would, and cut a family emoji between
// its people. Words past the limit are cut between glyphs, as the server cuts a title it makes
// (title_text.cut_between_glyphs).

const glyphs = new Intl.Segmenter(undefined, { granularity: "grapheme" });

const codePoints = (text) => Array.from(text).length;

/** The longest start of `text` of at most `limit` code points that ends between two glyphs. */
export function cutBetweenGlyphs(text, limit) {
  let units = 0;
  let points = 0;
  for (const { segment } of glyphs.segment(text)) {
    points += codePoints(segment);
    if (points > limit) break;
    units += segment.length;
  }
  return text.slice(0, units);
}

/**
 * Keeps `input` within `limit()` code points (0: no limit known): what is typed or pasted is cut
 * to the room left, where the caret is, as maxLength would; anything else that gets past (words
 * an input method composed) is cut from the end once written.
 */
export function limitCodePoints(input, limit) {
  input.addEventListener("beforeinput", (event) => {
    const max = limit();
    const inserted = event.data ?? event.dataTransfer?.getData("text/plain") ?? null;
    if (!max || !event.inputType.startsWith("insert") || inserted === null || event.isComposing) return;
    const { selectionStart: start, selectionEnd: end, value } = input;
    const room = max - codePoints(value.slice(0, start) + value.slice(end));
    if (codePoints(inserted) <= room) return;
    event.preventDefault();
    input.setRangeText(cutBetweenGlyphs(inserted, Math.max(room, 0)), start, end, "end");
  });
  input.addEventListener("input", (event) => {
    const max = limit();
    if (max && !event.isComposing && codePoints(input.value) > max) {
      input.value = cutBetweenGlyphs(input.value, max);
    }
  });
}
