"""What cdlaw does with the process and the disk, for every stage: errors and their exit
codes (`errors`), files written whole or not at all (`atomic`), a full disk told apart
from other failures (`disk_full`), worker processes that end with their parent
(`lifetime`), and the optional extras a command needs (`extras`)."""
