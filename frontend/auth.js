// Signing in and out: the login form, the session check at start, the logout button.
import { api } from "./api.js";
import { sentenceFor } from "./errors.js";

/**
 * @param {object} hooks
 * @param {(user: object) => void} hooks.signedIn the app view is shown; fill it
 * @param {(how: {signingOut?: boolean}) => Promise<void>} hooks.leaving before the sign-in form
 *   replaces the app (stop, clear; resolves once the Stops were tried); `signingOut`: the user
 *   signed out here, rather than the session ended
 * @param {(limits: object) => void} [hooks.limitsKnown] the server's limits, read at start
 */
export function createAuth({ signedIn, leaving, limitsKnown = () => {} }) {
  const loginView = document.getElementById("login-view");
  const form = document.getElementById("login-form");
  const error = document.getElementById("login-error");
  const appView = document.getElementById("app-view");
  const { username, password } = form.elements;

  function showLogin(message = "") {
    leaving();
    appView.hidden = true;
    loginView.hidden = false;
    error.textContent = message;
    error.hidden = !message;
    username.focus();
  }

  function showApp(user) {
    loginView.hidden = true;
    appView.hidden = false;
    document.getElementById("user-name").textContent = user.username;
    signedIn(user);
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      const { user } = await api.login(username.value, password.value);
      password.value = "";
      showApp(user);
    } catch (failure) {
      error.textContent = sentenceFor(failure);
      error.hidden = false;
      password.focus();
      password.select();
    } finally {
      submit.disabled = false;
    }
  });

  document.getElementById("logout").addEventListener("click", async () => {
    // The Stops first: one that lands after the logout is refused, and its answer runs on.
    await leaving({ signingOut: true });
    try {
      await api.logout();
    } catch {
      // Signed out or not, this browser shows the sign-in form next.
    }
    showLogin();
  });

  return {
    showLogin,
    /** Asks the server who we are (which also sets the CSRF cookie), then shows a view. */
    start: () => api.session().then(
      ({ user, limits }) => {
        limitsKnown(limits);
        return user ? showApp(user) : showLogin();
      },
      (failure) => showLogin(sentenceFor(failure)),
    ),
  };
}
