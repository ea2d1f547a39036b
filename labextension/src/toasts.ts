/**
 * JupyterLab's notifications as the OperationNotifier's sink, with a `dismiss` that resolves
 * once the toast is off the screen.
 *
 * Why: `Notification.dismiss` only asks. The toast leaves later, after a chain that no frame
 * count bounds on a busy machine: the notification plugin awaits react-toastify, which defers
 * its events with `setTimeout`, React renders the removal as its own task, and the exit
 * animation's class is added in an effect after paint (jupyterlab/jupyterlab
 * packages/apputils-extension/src/notificationplugin.tsx, `onNotification`; fkhadra/react-toastify
 * src/components/Toast.tsx renders the toast as `<div id={toastId}>`). So the sink watches the
 * page: the toast is gone when no element with its id is on the page, or the one there is
 * leaving (its class names an `exit` animation).
 */

import { Notification } from '@jupyterlab/apputils';

import { INotificationSink } from './notifier';

/** The longest a caller waits for a toast to leave: then it goes on regardless. */
export const TOAST_LEAVE_LIMIT_MS = 10_000;

/** The toast of notification `id` is on the page and not leaving. */
function toastShown(id: string): boolean {
  const node = document.getElementById(id);
  return !!node && node.classList.contains('Toastify__toast') && !/exit/.test(node.className);
}

/**
 * Resolves once the toast of `id` is not shown, checked first after react-toastify's deferred
 * events have run (one task later), then on every change of the page, at most `limitMs`.
 */
export function toastLeft(id: string, limitMs = TOAST_LEAVE_LIMIT_MS): Promise<void> {
  return new Promise(resolve => {
    let observer: MutationObserver | null = null;
    const done = (): void => {
      observer?.disconnect();
      clearTimeout(limit);
      resolve();
    };
    const limit = setTimeout(done, limitMs);
    setTimeout(() => {
      if (!toastShown(id)) {
        done();
        return;
      }
      observer = new MutationObserver(() => {
        if (!toastShown(id)) {
          done();
        }
      });
      observer.observe(document.body, { subtree: true, childList: true, attributes: true });
    });
  });
}

/** JupyterLab's `Notification`, its `dismiss` awaiting the toast's leaving. */
export const labNotifications: INotificationSink = {
  emit: (message, type, options) => Notification.emit(message, type, options),
  update: args => Notification.update(args),
  dismiss: id => {
    Notification.dismiss(id);
    return toastLeft(id);
  }
};
