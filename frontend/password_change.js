// Changing one's own password, in a dialog opened from the top bar. The current password proves
// who asks (the server counts a wrong one as a failed sign-in); the new one is typed twice, as
// nothing shows it; the server's validators have the last word, their reasons shown in the form.
// Once changed, this browser stays signed in and every other session of the account ends.
import { sentenceFor } from "./errors.js";

export const CHANGED = "Your password is changed. Other browsers and devices signed in to your account are signed out.";

// The field a refusal is about: it takes the focus, with its text selected to be typed again.
const FIELD_OF_CODE = { wrong_password: "old_password", invalid_password: "new_password" };

/**
 * What keeps the form from being sent, as `{field, sentence}` (the field's name); null when
 * nothing does. The server checks the passwords themselves.
 */
export function formProblem({ oldPassword, newPassword, repeated }) {
  if (!oldPassword) return { field: "old_password", sentence: "Type your current password." };
  if (!newPassword) return { field: "new_password", sentence: "Type a new password." };
  if (newPassword !== repeated) {
    return { field: "repeated", sentence: "The new password and its repetition differ. Please type it again." };
  }
  return null;
}

/** The server's refusal as `{field, sentence}`; field null when it is about no one field. */
export function refusalProblem(refusal) {
  return { field: FIELD_OF_CODE[refusal?.code] ?? null, sentence: sentenceFor(refusal) };
}

/**
 * @param {object} parts
 * @param {object} parts.api the API of api.js (changePassword)
 * @param {(error: Error) => void} parts.failed a refusal that ends the session here (401)
 * @param {(text: string) => void} parts.announce
 */
export function createPasswordChange({ api, failed, announce }) {
  const $ = (id) => document.getElementById(id);
  const control = $("change-password");
  const dialog = $("password-dialog");
  const form = $("password-form");
  const error = $("password-error");
  const changed = $("password-changed");
  const { username, old_password: oldPassword, new_password: newPassword, repeated } = form.elements;
  const submit = form.querySelector("button[type=submit]");

  function showProblem(problem) {
    error.textContent = problem?.sentence ?? "";
    error.hidden = !problem;
    const field = problem?.field ? form.elements[problem.field] : null;
    for (const input of [oldPassword, newPassword, repeated]) {
      if (input === field) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
    field?.focus();
    field?.select();
  }

  control.addEventListener("click", () => {
    changed.hidden = true;
    // For a password manager: the account whose password this is.
    username.value = $("user-name").textContent;
    dialog.showModal();
    oldPassword.focus();
  });

  // Escape is the dialog's own (it closes it): not a Stop of the answer being written behind it.
  dialog.addEventListener("keydown", (event) => {
    if (event.key === "Escape") event.stopPropagation();
  });
  $("password-cancel").addEventListener("click", () => dialog.close());

  // However it closes (Cancel, Escape, a change, a sign-out), nothing typed stays in the page.
  dialog.addEventListener("close", () => {
    form.reset();
    showProblem(null);
    control.focus();
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const problem = formProblem({ oldPassword: oldPassword.value, newPassword: newPassword.value,
      repeated: repeated.value });
    if (problem) return showProblem(problem);
    submit.disabled = true;
    try {
      await api.changePassword(oldPassword.value, newPassword.value);
      dialog.close();
      changed.hidden = false;
      announce(CHANGED);
    } catch (refusal) {
      if (refusal?.status === 401) failed(refusal);
      else if (dialog.open) showProblem(refusalProblem(refusal)); // closed meanwhile: given up
    } finally {
      submit.disabled = false;
    }
  });

  return {
    /** The page leaves this account (sign-out, session ended): the dialog closes, the note goes. */
    leaving() {
      if (dialog.open) dialog.close();
      changed.hidden = true;
    },
  };
}
