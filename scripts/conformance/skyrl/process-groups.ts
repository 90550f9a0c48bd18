/** Whether any process of the group is still alive. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** SIGTERM to the whole process group, SIGKILL to what is left after `graceMs`; resolves once the group is gone. */
export async function stopProcessGroup(pgid: number | undefined, graceMs = 15_000): Promise<void> {
  if (!pgid || !groupAlive(pgid)) return;
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-pgid, s);
    } catch {
      /* already gone */
    }
  };
  signal('SIGTERM');
  for (const deadline = Date.now() + graceMs; groupAlive(pgid) && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 100));
  if (!groupAlive(pgid)) return;
  signal('SIGKILL');
  for (const deadline = Date.now() + 5_000; groupAlive(pgid) && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 100));
}
