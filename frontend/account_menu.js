// On a phone, who is signed in, Change password and Sign out drop down from the top bar's account
// button (beside the title they took a second row). A disclosure: the button shows and hides
// them; Escape, or a tap elsewhere on the page, hides them again.

export function createAccountMenu() {
  const toggle = document.getElementById("account-toggle");
  const menu = document.getElementById("account-menu");
  const isOpen = () => toggle.getAttribute("aria-expanded") === "true";
  const setOpen = (open) => toggle.setAttribute("aria-expanded", String(open));

  toggle.addEventListener("click", () => setOpen(!isOpen()));
  // Escape here closes the menu: it is not a Stop of the answer being written (keys.js).
  for (const el of [toggle, menu]) {
    el.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || !isOpen()) return;
      event.preventDefault();
      setOpen(false);
      toggle.focus();
    });
  }
  // Not from a dialog: Change password's returns the focus to its button, in the menu.
  document.addEventListener("click", (event) => {
    if (isOpen() && !event.target.closest("#account-toggle, #account-menu, dialog")) setOpen(false);
  });
  // Wide enough, the controls stand in the top bar again, and the button hides: closed.
  matchMedia("not all and (max-width: 45em)").addEventListener("change", (event) => event.matches && setOpen(false));

  return { close: () => setOpen(false) };
}
