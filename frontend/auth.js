// Signing in and out: the login form, the session check at start, the logout button, and the
// other tabs of this browser, which share its session cookie: each follows a sign-in or sign-out
// made in another.
import { api } from "./api.js";
import { sentenceFor } from "./errors.js";

const SIGNED_OUT_ELSEWHERE = "You signed out in another tab or window.";
const NOT_SIGNED_OUT = "Signing out did not reach the server, so this browser may still be signed in. "
  + "Check your connection, then reload the page and sign out again.";

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
  let shownUser = null; // the username whose conversations this tab shows; null at the sign-in form
  const otherTabs = typeof BroadcastChannel === "function" ? new BroadcastChannel("chatapp.session") : null;
  const tellOtherTabs = (user) => otherTabs?.postMessage({ user });

  function showLogin(message = "") {
    shownUser = null;
    leaving();
    appView.hidden = true;
    loginView.hidden = false;
    error.textContent = message;
    error.hidden = !message;
    username.focus();
  }

  function showApp(user) {
    shownUser = user.username;
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
      tellOtherTabs(user.username);
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
    let message = "";
    try {
      await api.logout();
    } catch (failure) {
      // The sign-in form shows next either way, but unless the session had ended already (401) it
      // lives on at the server, and its cookie signs this browser in again at the next load.
      if (failure?.status !== 401) message = NOT_SIGNED_OUT;
    }
    showLogin(message);
    tellOtherTabs(null);
  });

  // Another tab signed in or out: this one shows what the shared session now holds, rather than
  // the conversations of someone who signed out (or the sign-in form to someone signed in).
  otherTabs?.addEventListener("message", async ({ data }) => {
    if ((data?.user ?? null) === shownUser) return;
    let user;
    try {
      ({ user } = await api.session());
    } catch {
      return; // not reached: the tab's next request will tell
    }
    if ((user?.username ?? null) === shownUser) return;
    if (!user) return showLogin(SIGNED_OUT_ELSEWHERE);
    if (shownUser !== null) leaving(); // the previous user's answers and conversations go first
    showApp(user);
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
