
node-ai1
node-a