// Where the EventStoreDB contract run finds a server: EVENTSTORE_URL, else a KurrentDB container
// when a container runtime answers (testcontainers), else none — and then why, for the run's output.
import { EventStoreDBClient } from '@eventstore/db-client';
import { setTimeout as sleep } from 'node:timers/promises';

export const KURRENTDB_IMAGE = 'docker.eventstore.com/kurrent-latest/kurrentdb:latest';
const HTTP_PORT = 2113;

export type EventStoreDbServer =
  | { readonly source: 'EVENTSTORE_URL'; readonly url: string }
  | { readonly source: 'testcontainers' }
  | { readonly source: 'none'; readonly reason: string };

const firstLine = (error: unknown): string => (error instanceof Error ? error.message : String(error)).split('\n')[0]!.trim();

/** Quick (about a second without a runtime): starts nothing, only asks whether a container could be. */
export async function findEventStoreDbServer(): Promise<EventStoreDbServer> {
  const url = process.env.EVENTSTORE_URL;
  if (url) return { source: 'EVENTSTORE_URL', url };
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return { source: 'testcontainers' };
  } catch (error) {
    // testcontainers says "Could not find a working container runtime strategy" when none answers.
    return { source: 'none', reason: firstLine(error) };
  }
}

export interface StartedServer {
  readonly url: string;
  stop(): Promise<void>;
}

/** A throwaway single node, insecure (no TLS, no users), its log in memory. */
export async function startKurrentDbContainer(): Promise<StartedServer> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const container = await new GenericContainer(KURRENTDB_IMAGE)
    .withEnvironment({ KURRENTDB_INSECURE: 'true', KURRENTDB_MEM_DB: 'true', KURRENTDB_CLUSTER_SIZE: '1' })
    .withExposedPorts(HTTP_PORT)
    .withWaitStrategy(Wait.forHttp('/health/live', HTTP_PORT).forStatusCode(204))
    .withStartupTimeout(120_000)
    .start();
  return {
    url: `esdb://${container.getHost()}:${container.getMappedPort(HTTP_PORT)}?tls=false`,
    stop: async () => {
      await container.stop();
    },
  };
}

/** Waits until the node answers reads as leader: a node that is live may not have elected itself yet. */
export async function untilLeaderAnswers(client: EventStoreDBClient, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      for await (const _ of client.readAll({ maxCount: 1, requiresLeader: true })) break;
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`EventStoreDB did not answer as leader within ${timeoutMs} ms: ${firstLine(error)}`);
      await sleep(250);
    }
  }
}
