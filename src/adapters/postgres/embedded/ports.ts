import { createServer } from 'node:net';

// The TCP port the server listens on: the one asked for, else the one remembered if free, else
// one the OS picks (a few tries: a port picked may be taken before postgres binds it).

const PORT_ATTEMPTS = 3;

export function candidatePorts(explicit: number | undefined, remembered: number | undefined): Array<() => Promise<number>> {
  if (explicit !== undefined) return [async () => explicit];
  const attempts: Array<() => Promise<number>> = [];
  if (remembered !== undefined) {
    attempts.push(async () => ((await isPortFree(remembered)) ? remembered : freePort()));
  }
  while (attempts.length < PORT_ATTEMPTS) attempts.push(freePort);
  return attempts;
}

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? res(port) : rej(new Error('could not get a free port'))));
    });
  });
}

async function isPortFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}
