/* compact: segment compaction (see store.h). */
#include "store/internal.h"

#include <errno.h>

int
store__compact_start(struct store *st)
{
    (void) st;
    return 0;
}

void
store__compact_stop(struct store *st)
{
    (void) st;
}
