// Lists redrawn from fresh data keep the elements they already show (the conversation list, the
// staff's live view): a click begun on one, a rename under way in it, or the keyboard's focus on
// it survives the redraw, where rebuilt elements would take the mouse's release or drop the focus.

/**
 * Puts `children` in `parent` in that order, and nothing else: it moves as few as it can, and
 * never the one holding the keyboard's focus (a node moved loses it, and an input there would
 * take that for a blur).
 */
export function arrangeChildren(parent, children) {
  const wanted = new Set(children);
  for (const child of [...parent.children]) if (!wanted.has(child)) child.remove();
  const anchor = children.find((child) => child.contains(document.activeElement));
  children.forEach((child, i) => {
    while (child === anchor && parent.children[i] !== anchor) parent.append(parent.children[i]);
    if (parent.children[i] !== child) parent.insertBefore(child, parent.children[i] ?? null);
  });
}
