// Keys that belong to an input method (Japanese, Chinese, Korean…) while it composes: its Enter
// picks a candidate and its Escape drops one, so neither is a command of the page.

/**
 * True for a keydown that is part of a composition. keyCode 229 marks the keydown that ends one
 * where the browser reports it after `compositionend`, with isComposing already false (Safari).
 */
export const isComposing = (event) => event.isComposing || event.keyCode === 229;
